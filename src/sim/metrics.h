// SimMetrics: what one simulation measures, recorded as its events happen and summarized into a
// SimResult at the end (the figures of DualPath §7: JCT, TTFT / TTST / TPOT, storage-NIC and
// attention balance, the decode side over time, the critical path).
//
// The simulation (simulator.cc) calls the recording methods from its event handlers; Collect()
// reads the cluster's storage NICs and the decode series once the event queue is empty. Online,
// TTFT counts only requests arriving in the steady window (SetSteadyWindow), so warm-up and drain
// do not dilute a growing queue (docs/sim.md "Results").
//
// Thread safety: none (owned by one simulation).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/common/huge_pages.h"
#include "dualpath/sched/types.h"
#include "dualpath/sim/simulator.h"
#include "sim/cluster_state.h"
#include "sim/time_bins.h"

namespace dualpath::sim {

class SimMetrics {
 public:
  SimMetrics(const SimConfig& config, bool online);

  // One AgentPath per agent in run order; the caller fills in each one's agent, turns and start
  // (the fields RequestDone sets are kept apart: AgentSums).
  void InitAgents(size_t agents) {
    agent_path_.assign(agents, AgentPath{});
    agent_sums_.assign(agents, AgentSums{});
    done_log_.clear();
    done_log_.reserve(kDoneBatch);
  }
  AgentPath& agent(uint32_t agent) { return agent_path_[agent]; }
  // Online: TTFT over requests arriving in [from, to].
  void SetSteadyWindow(double from, double to) {
    steady_from_ = from;
    steady_to_ = to;
  }
  void ReserveRequests(uint64_t requests);

  // A request that arrived at `arrival` produced its first token at `now`.
  void FirstToken(double arrival, double now);
  // A prefill forward batch starting at `now`: slowest GPU's attention time over the group mean.
  void AttentionStep(double now, double max_over_avg) {
    attn_ratio_.emplace_back(now, max_over_avg);
  }
  // A prefill EP group started a forward of `duration` seconds.
  void PrefillStep(double duration) { prefill_busy_s_ += duration; }
  // A decode group ran `batch` requests at step time `tau` over [from, to).
  void DecodeInterval(double from, double to, double batch, double tau);
  // A request finished decoding: its mean time per output token after the second.
  void Tpot(double seconds_per_token) {
    tpot_sum_ += seconds_per_token;
    tpot_n_++;
  }
  // A request of `agent` arrived at `arrival`, produced its first token at `first_token`, its
  // second at `second_token`, and completed at `now` after generating `gen` tokens.
  void RequestDone(uint32_t agent, double arrival, double first_token, double second_token,
                   double now, uint64_t gen);
  // A request of `agent` that no engine can hold (sched::CheckTooLong) was refused at `now`, on
  // arrival: counted by side; it answers the turn (the agent's finish and the JCT move to `now`)
  // but adds no latency sample.
  void TooLong(uint32_t agent, sched::TooLong side, double now);
  // The agent's last turn completed at `now`.
  void AgentDone(uint32_t agent, double now);
  uint64_t requests_done() const { return requests_done_; }
  const TooLongRequests& too_long() const { return too_long_; }

  // The summary of the run for `system`: reads the cluster's storage-NIC bins and coarsens every
  // series to one window width (time_bins.h). `events` is the event count.
  SimResult Collect(std::string system, ClusterState& cluster, double snic_bytes_per_s,
                    uint64_t events);

 private:
  double CoarsenSeries(ClusterState& cluster, double jct_s);
  void CollectSnic(const ClusterState& cluster, double snic_bytes_per_s, size_t windows,
                   SimResult* r) const;
  double AttentionBalance(double jct_s) const;
  void CollectDecodeSeries(size_t decode_gpus, size_t windows, SimResult* r) const;

  const SimConfig& cfg_;
  bool online_;
  std::vector<float> ttft_;
  double ttst_sum_ = 0;
  uint64_t ttst_n_ = 0;
  double tpot_sum_ = 0;
  uint64_t tpot_n_ = 0;
  double prefill_busy_s_ = 0;  // summed over prefill groups
  double agent_jct_sum_ = 0;
  uint64_t agents_done_ = 0;
  uint64_t requests_done_ = 0;  // served (not refused) requests
  TooLongRequests too_long_;    // counts only; the simulation sets the capacities
  double last_completion_ = 0;
  std::vector<std::pair<double, double>> attn_ratio_;  // (time, max/avg) per prefill step
  // Per agent, the AgentPath fields every one of its requests updates, 32 bytes aligned so that one
  // line (one prefetch) holds them: a whole AgentPath is 56 bytes, straddled two cache lines for
  // most agents and missed on every request (issue 27). Collect() puts the two parts together.
  struct alignas(32) AgentSums {
    uint64_t generated_tokens = 0;
    double finish_s = 0;
    double to_first_token_s = 0;
    double decode_s = 0;
  };
  std::vector<AgentPath> agent_path_;     // per agent: agent, turns, start (the rest: agent_sums_)
  HugePageVector<AgentSums> agent_sums_;  // in huge pages: read at a random agent's place
  // RequestDone's updates of agent_sums_, logged and applied in batches (FlushDone): applied one
  // at a time, each was a cache miss on a random agent's line that stalled the completion (the
  // prefetch when the completion was timed came too early or too late; ~6 % of a 48K-agent run,
  // issue 27). A batch prefetches kDoneAhead entries ahead, so its misses overlap. Every update
  // is the same double operation in the same order per agent (the log keeps completion order),
  // so the sums are bit-identical; anything that reads or writes agent_sums_ flushes first.
  struct DoneEntry {
    uint32_t agent;
    uint64_t gen;
    double to_first_token_s;  // first_token - arrival
    double decode_s;          // now - first_token
    double now;
  };
  static constexpr size_t kDoneBatch = 1024;  // 40 KB of log
  static constexpr size_t kDoneAhead = 16;
  void FlushDone();
  std::vector<DoneEntry> done_log_;
  // Per window (snic_window_s, widened on long runs: time_bins.h), summed over decode groups:
  // integral of requests in decode, time a group was decoding, and integral of its step time
  // while it was.
  TimeBins dec_batch_time_, dec_active_time_, dec_tau_time_;
  double steady_from_ = 0, steady_to_ = 0;  // online TTFT window (arrival times)
};

}  // namespace dualpath::sim
