#include "dualpath/benchlib/decision_loop.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace dualpath::sched {

Result<std::unique_ptr<DecisionLoop>> DecisionLoop::Create(const UniformClusterSpec& spec,
                                                           const SchedConfig& config,
                                                           uint64_t seed) {
  ASSIGN_OR_RETURN(ClusterDesc cluster, MakeUniformCluster(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> sched, Scheduler::Create(cluster, config));
  std::unique_ptr<DecisionLoop> loop(new DecisionLoop());
  loop->sched_ = std::move(sched);

  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> context(std::log(30000.0), 0.5);
  std::exponential_distribution<double> append(1.0 / 430);
  std::exponential_distribution<double> gen(1.0 / 176);
  loop->work_.resize(1 << 16);
  for (size_t i = 0; i < loop->work_.size(); ++i) {
    SchedRequest& r = loop->work_[i];
    r.id = RequestId(i);
    r.session = SessionId(i % 2048);
    r.hit_tokens = std::min<int64_t>(65536, static_cast<int64_t>(context(rng)));
    r.prompt_tokens = r.hit_tokens + 1 + static_cast<int64_t>(append(rng));
    r.expected_gen_tokens = 1 + static_cast<int64_t>(gen(rng));
  }

  const uint32_t groups = static_cast<uint32_t>(cluster.num_groups());
  loop->reports_.resize(groups);
  for (const EngineDesc& e : cluster.engines) {
    EngineReport rep;
    rep.engine = e.id;
    rep.unfinished_requests = static_cast<int64_t>(rng() % 4);
    rep.unfinished_tokens = rep.unfinished_requests * 30000;
    rep.read_queue_tokens =
        static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * config.short_read_queue_tokens + 1));
    rep.hbm_free_tokens = e.role == Role::kDecode ? 2'000'000 : 0;
    loop->reports_[e.group.value()].push_back(rep);
  }
  for (uint32_t g = 0; g < groups; ++g) {
    (loop->sched_->group_role(GroupId(g)) == Role::kPrefill ? loop->prefill_groups_
                                                            : loop->decode_groups_)
        .push_back(g);
  }
  loop->out_.decode.reserve(4096);
  loop->out_.prefill.reserve(4096);
  return loop;
}

Result<int64_t> DecisionLoop::Step() {
  for (int i = 0; i < kRequestsPerStep; ++i) {
    RETURN_IF_ERROR(sched_->Submit(work_[next_++ & (work_.size() - 1)]));
  }
  out_.Clear();
  const uint32_t dg = decode_groups_[de_i_++ % decode_groups_.size()];
  RETURN_IF_ERROR(sched_->FetchForGroup(GroupId(dg), reports_[dg], &out_));
  const uint32_t pg = prefill_groups_[pe_i_++ % prefill_groups_.size()];
  RETURN_IF_ERROR(sched_->FetchForGroup(GroupId(pg), reports_[pg], &out_));
  return static_cast<int64_t>(out_.prefill.size());
}

}  // namespace dualpath::sched
