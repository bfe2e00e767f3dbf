// SchedDriver: how the simulator drives the production scheduler (dualpath::sched), exactly as a
// cluster's engines would (docs/sched.md "How the simulator drives this").
//
// Engines report their load when their group fetches; each group's leader fetches regularly
// (every fetch_interval of simulated time while the scheduler has pending work; the paper does not
// say how often), each group on its own timer, staggered, as independent leaders would. A fixed
// fetch order instead would hand every burst of arrivals to whichever group fetches first. The
// driver translates between the simulator's request slots and the scheduler's RequestIds, and fits
// the scheduler's attention-time model (§6.2) to the model's FLOP counts, so the scheduler
// estimates time the way a profiled deployment would while the simulator charges the exact cost.
//
// Thread safety: none (owned by one simulation).
#pragma once

#include <memory>
#include <vector>

#include "dualpath/sched/batch.h"
#include "dualpath/sched/scheduler.h"
#include "dualpath/sim/simulator.h"
#include "sim/cluster_state.h"
#include "sim/cost_model.h"

namespace dualpath::sim {

// The scheduler config (policy switches + thresholds) for a system.
sched::SchedConfig SchedConfigFor(SystemKind system, const SimConfig& config, double alpha_tokens,
                                  double beta_tokens);

// Least-squares fit of sched::AttentionTimeModel to CostModel::PrefillAttentionTime over the
// (cached, new) range agentic prefill sees.
sched::AttentionTimeModel FitAttentionModel(const CostModel& cost);

class SchedDriver {
 public:
  static Result<std::unique_ptr<SchedDriver>> Create(const ClusterState& cluster,
                                                     const sched::SchedConfig& config);

  Status Submit(uint32_t slot, uint64_t prompt, uint64_t hit, uint64_t gen);
  // Group `group` (0..num_groups()-1) fetches with fresh reports of its engines from `cluster` at
  // `now`; appends the decisions.
  Status FetchGroup(uint32_t group, const ClusterState& cluster, double now,
                    std::vector<sched::DecodeAssignment>* decode,
                    std::vector<sched::Assignment>* prefill);
  uint32_t num_groups() const { return static_cast<uint32_t>(group_engines_.size()); }
  bool HasPending() const { return sched_->pending() > 0; }
  const sched::SchedStats& stats() const { return sched_->stats(); }

 private:
  explicit SchedDriver(std::unique_ptr<sched::Scheduler> s) : sched_(std::move(s)) {}
  sched::EngineReport Report(const ClusterState& c, uint32_t engine, double now) const;

  std::unique_ptr<sched::Scheduler> sched_;
  std::vector<std::vector<uint32_t>> group_engines_;  // by sched group id
  std::vector<bool> group_is_prefill_;                // by sched group id
  std::vector<sched::EngineReport> reports_;
  sched::FetchResult out_;
};

}  // namespace dualpath::sim
