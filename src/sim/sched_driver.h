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
#include <optional>
#include <vector>

#include "dualpath/sched/batch.h"
#include "dualpath/sched/scheduler.h"
#include "dualpath/sched/system.h"
#include "dualpath/sim/simulator.h"
#include "sim/cluster_state.h"
#include "sim/cost_model.h"

namespace dualpath::sim {

// §6.1 thresholds in tokens, derived from profiled rates (A.4: "profiled in advance"):
//   alpha = tokens one node's storage NIC reads in sched.short_read_queue_s;
//   beta  = prompt tokens one PE prefills in sched.unfinished_token_limit_s, estimated on the
//           workload's mean request (mean hit, mean new tokens) in a compute-quota-sized batch.
struct SchedThresholds {
  double alpha_tokens = 0;
  double beta_tokens = 0;
};
SchedThresholds DeriveThresholds(const SimConfig& config, const CostModel& cost,
                                 const SimWorkload& workload);

// The scheduler config of a run: the system's preset (sched::PresetFor, the one mapping) with the
// thresholds, the compute quota and the block size of this simulated deployment.
sched::SchedConfig SchedConfigFor(SystemKind system, const SimConfig& config,
                                  const SchedThresholds& thresholds);

// Least-squares fit of sched::AttentionTimeModel to CostModel::PrefillAttentionTime over the
// (cached, new) range agentic prefill sees.
sched::AttentionTimeModel FitAttentionModel(const CostModel& cost);

class SchedDriver {
 public:
  // Drives a scheduler with `config` (SchedConfigFor(system, ...)) for `system`.
  static Result<std::unique_ptr<SchedDriver>> Create(const ClusterState& cluster, SystemKind system,
                                                     const sched::SchedConfig& config);

  // Submits the request in `slot` with its real hit; the Oracle rule (sched::SchedHitTokens)
  // decides what the scheduler sees. `prefill_engine`: the routing's fixed PE (index into
  // ClusterState::pes = its engine id), or none.
  Status Submit(uint32_t slot, uint64_t prompt, uint64_t hit, uint64_t gen,
                std::optional<uint32_t> prefill_engine = std::nullopt);
  // Group `group` (0..num_groups()-1) fetches with fresh reports of its engines from `cluster` at
  // `now`; *out is cleared and holds the decisions (the scheduler writes them there, no copy).
  // A fetch tick asks SkipIdleFetch first and calls this only when it says no.
  Status FetchGroup(uint32_t group, const ClusterState& cluster, double now,
                    sched::FetchResult* out);
  uint32_t num_groups() const { return static_cast<uint32_t>(group_engines_.size()); }
  // Whether group `group`'s fetch now would change nothing the scheduler later reads (IdleFetch,
  // with the skips on); counted as skipped when so. The caller then does not call FetchGroup:
  // its decisions would be none.
  bool SkipIdleFetch(uint32_t group) {
    if (!IdleFetch(group)) return false;
    ++skipped_;
    if (group_[group].blocked) ++skipped_blocked_;
    return true;
  }
  // The simulation changed decode engine `engine`'s load (a request completed on it) outside a
  // fetch: its group's next fetch must report it (see FetchGroup).
  void DecodeEngineChanged(uint32_t engine) { MarkDirty(engine); }
  // Off: every fetch calls the scheduler with every engine's report (the reference the skips are
  // tested against).
  void set_skip_idle_fetches(bool on) { skip_idle_ = on; }
  // Fetches answered without calling the scheduler (they could not change anything).
  uint64_t skipped_fetches() const { return skipped_; }
  // Of those, fetches of a decode group whose private queue waits for HBM (IdleFetch).
  uint64_t skipped_blocked_fetches() const { return skipped_blocked_; }
  // Decode engine reports not sent because they would repeat the scheduler's view (FetchGroup).
  uint64_t unsent_reports() const { return unsent_reports_; }
  bool HasPending() const { return sched_->pending() > 0; }
  const sched::SchedStats& stats() const { return sched_->stats(); }

 private:
  SchedDriver(std::unique_ptr<sched::Scheduler> s, SystemKind system)
      : sched_(std::move(s)), system_(system) {}
  // Writes `engine`'s report, with its node's read queue (tokens) already computed, to *out.
  void FillReport(const ClusterState& c, uint32_t engine, int64_t read_queue_tokens,
                  sched::EngineReport* out) const;
  static uint32_t NodeOf(const ClusterState& c, uint32_t engine);
  // The fetch of `group` now would change nothing the scheduler later reads (FetchGroup).
  bool IdleFetch(uint32_t group) const;

  std::unique_ptr<sched::Scheduler> sched_;
  SystemKind system_;
  std::vector<std::vector<uint32_t>> group_engines_;  // by sched group id
  // What every fetch tick reads of its group (IdleFetch), in one 8-byte record: separate arrays
  // (and the engine list's size) were a cache miss each per tick (issue 27). Flags as bytes (0/1),
  // not bits: the bit arithmetic cost more than the check.
  struct GroupInfo {
    uint32_t dirty_word = 0;   // its first word in dirty_words_
    uint16_t dirty_words = 0;  // its number of words there: (engines + 63) / 64
    uint8_t prefill = 0;       // a prefill group
    // A decode group whose last fetch left requests in its private queue, so its head fits no DE
    // of the group (phase 2 places until the head does not fit). Until the group is dirty again
    // the head and the DEs' free HBM are what that fetch saw.
    uint8_t blocked = 0;
  };
  std::vector<GroupInfo> group_;        // by sched group id
  std::vector<uint32_t> engine_group_;  // by engine id
  // Decode engines whose load may differ from their last report (set by a decode assignment or
  // DecodeEngineChanged; all set at the start, before any report): one bit per engine, by its
  // place in its group (engine_bit_), the group's bits from word group_[group].dirty_word on. A
  // fetch visits the set bits only (usually one of eight: a completion dirtied one engine). A
  // decode group is dirty (its loads may differ from what the scheduler last got from its
  // reports) when any of its bits is set (GroupDirty).
  std::vector<uint64_t> dirty_words_;
  std::vector<uint32_t> engine_bit_;  // by engine id: its index in group_engines_[its group]
  uint64_t* DirtyWords(uint32_t group) { return &dirty_words_[group_[group].dirty_word]; }
  size_t DirtyWordCount(uint32_t group) const { return group_[group].dirty_words; }
  bool GroupDirty(uint32_t group) const {
    const GroupInfo& info = group_[group];
    const uint64_t* w = &dirty_words_[info.dirty_word];
    for (size_t i = 0, n = info.dirty_words; i < n; ++i) {
      if (w[i] != 0) return true;
    }
    return false;
  }
  // Sets the bit of `engine`, an engine of the group whose words `words` are.
  void SetDirty(uint64_t* words, uint32_t engine) const {
    const uint32_t bit = engine_bit_[engine];
    words[bit / 64] |= uint64_t{1} << (bit % 64);
  }
  void MarkDirty(uint32_t engine) { SetDirty(DirtyWords(engine_group_[engine]), engine); }
  uint64_t unsent_reports_ = 0;
  uint64_t skipped_blocked_ = 0;
  bool skip_idle_ = true;
  uint64_t skipped_ = 0;
  std::vector<sched::EngineReport> reports_;
};

}  // namespace dualpath::sim
