// Helpers shared by the scheduler unit tests (private to sched's tests).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dualpath/sched/scheduler.h"

namespace dualpath::sched::testing {

inline std::unique_ptr<Scheduler> MakeScheduler(const ClusterDesc& cluster,
                                                const SchedConfig& config) {
  auto s = Scheduler::Create(cluster, config);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

inline SchedRequest Req(uint64_t id, int64_t prompt, int64_t hit, int64_t gen = 0) {
  SchedRequest r;
  r.id = RequestId(id);
  r.session = SessionId(id);
  r.prompt_tokens = prompt;
  r.hit_tokens = hit;
  r.expected_gen_tokens = gen;
  return r;
}

inline EngineReport Report(uint32_t engine, int64_t requests, int64_t tokens, int64_t read_queue,
                           int64_t hbm_free = 0) {
  EngineReport r;
  r.engine = EngineId(engine);
  r.unfinished_requests = requests;
  r.unfinished_tokens = tokens;
  r.read_queue_tokens = read_queue;
  r.hbm_free_tokens = hbm_free;
  return r;
}

}  // namespace dualpath::sched::testing
