// A steady-state driver of the Scheduler for throughput measurement (the sched_bench
// microbenchmark and `dualpath bench sched` share it). Not a simulator. Part of dualpath_benchlib
// (docs/architecture.md), in the namespace of the component it measures (dualpath::sched).
//
// Each Step() submits a batch of requests drawn from a seeded 64K-like agentic distribution
// (~30K context, ~430 append, ~176 generated tokens), then runs one decode-group fetch and one
// prefill-group fetch, cycling over the groups, with reports that say the fetching engines have
// drained (a few requests in flight, varied read queues), so every step does real placement work
// and the queues stay bounded. A decision = one request given its DE, PE and read side.
//
// No clock: the caller times Step(). Thread safety: none.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/sched/scheduler.h"

namespace dualpath::sched {

class DecisionLoop {
 public:
  static constexpr int kRequestsPerStep = 64;

  static Result<std::unique_ptr<DecisionLoop>> Create(const UniformClusterSpec& spec,
                                                      const SchedConfig& config, uint64_t seed);

  // Returns the decisions made in this step.
  Result<int64_t> Step();

  int64_t pending() const { return sched_->pending(); }
  const Scheduler& scheduler() const { return *sched_; }

 private:
  DecisionLoop() = default;
  std::unique_ptr<Scheduler> sched_;
  std::vector<SchedRequest> work_;                  // power-of-two size, cycled
  std::vector<std::vector<EngineReport>> reports_;  // per group
  std::vector<uint32_t> prefill_groups_, decode_groups_;
  FetchResult out_;
  uint64_t next_ = 0, pe_i_ = 0, de_i_ = 0;
};

}  // namespace dualpath::sched
