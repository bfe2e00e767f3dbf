#include "sim/metrics.h"

#include <algorithm>
#include <cmath>

#include "dualpath/common/stats.h"

namespace dualpath::sim {

SimMetrics::SimMetrics(const SimConfig& config, bool online)
    : cfg_(config),
      online_(online),
      dec_batch_time_(config.snic_window_s),
      dec_active_time_(config.snic_window_s),
      dec_tau_time_(config.snic_window_s) {}

void SimMetrics::ReserveRequests(uint64_t requests) {
  ttft_.reserve(std::min<uint64_t>(requests, 1 << 24));
}

void SimMetrics::FirstToken(double arrival, double now) {
  if (!online_ || (arrival >= steady_from_ && arrival <= steady_to_)) {
    ttft_.push_back(static_cast<float>(now - arrival));
  }
}

void SimMetrics::DecodeInterval(double from, double to, double batch, double tau) {
  // The three series always get the same intervals: one window computation for all three.
  TimeBins* const series[] = {&dec_batch_time_, &dec_active_time_, &dec_tau_time_};
  const double rates[] = {batch, 1.0, tau};
  TimeBins::AddSpreadTogether(series, from, to, rates);
}

void SimMetrics::RequestDone(uint32_t agent, double arrival, double first_token,
                             double second_token, double now, uint64_t gen) {
  ttst_sum_ += second_token - first_token;
  ttst_n_++;
  done_log_.push_back(DoneEntry{agent, gen, first_token - arrival, now - first_token, now});
  if (done_log_.size() == kDoneBatch) FlushDone();
  requests_done_++;
  last_completion_ = std::max(last_completion_, now);
}

void SimMetrics::FlushDone() {
  const DoneEntry* log = done_log_.data();
  const size_t n = done_log_.size();
  for (size_t i = 0; i < n && i < kDoneAhead; ++i)
    __builtin_prefetch(&agent_sums_[log[i].agent], 1);
  for (size_t i = 0; i < n; ++i) {
    if (i + kDoneAhead < n) __builtin_prefetch(&agent_sums_[log[i + kDoneAhead].agent], 1);
    const DoneEntry& d = log[i];
    AgentSums& path = agent_sums_[d.agent];
    path.to_first_token_s += d.to_first_token_s;
    path.decode_s += d.decode_s;
    path.generated_tokens += d.gen;
    path.finish_s = d.now;
  }
  done_log_.clear();
}

void SimMetrics::TooLong(uint32_t agent, sched::TooLong side, double now) {
  too_long_.requests++;
  (side == sched::TooLong::kPrefill ? too_long_.prefill : too_long_.decode)++;
  FlushDone();  // the agent's earlier completions set finish_s first
  agent_sums_[agent].finish_s = now;
  last_completion_ = std::max(last_completion_, now);
}

void SimMetrics::AgentDone(uint32_t agent, double now) {
  agent_jct_sum_ += now - agent_path_[agent].start_s;
  agents_done_++;
}

SimResult SimMetrics::Collect(std::string system, ClusterState& cluster, double snic_bytes_per_s,
                              uint64_t events) {
  FlushDone();
  SimResult r;
  r.system = std::move(system);
  r.requests = requests_done_;
  r.too_long = too_long_;
  r.agents = agents_done_;
  r.jct_s = last_completion_;
  r.mean_agent_jct_s = agents_done_ ? agent_jct_sum_ / static_cast<double>(agents_done_) : 0;
  double sum = 0;
  for (float x : ttft_) sum += x;
  r.ttft_mean_s = ttft_.empty() ? 0 : sum / static_cast<double>(ttft_.size());
  r.ttft_p50_s = Percentile(ttft_, 0.5);  // nearest rank (common/stats.h)
  r.ttft_p99_s = Percentile(ttft_, 0.99);
  r.ttst_mean_s = ttst_n_ ? ttst_sum_ / static_cast<double>(ttst_n_) : 0;
  r.tpot_mean_s = tpot_n_ ? tpot_sum_ / static_cast<double>(tpot_n_) : 0;
  r.events = events;

  r.window_s = CoarsenSeries(cluster, r.jct_s);
  const auto windows = static_cast<size_t>(std::ceil(r.jct_s / r.window_s));
  CollectSnic(cluster, snic_bytes_per_s, windows, &r);
  r.attn_max_over_avg = AttentionBalance(r.jct_s);
  // Prefill EP groups of min(pe_ep_nodes, prefill nodes) nodes each (the simulator's grouping).
  const uint32_t group_nodes =
      std::max(1u, std::min(cfg_.engine.pe_ep_nodes, cluster.prefill_nodes));
  const double pe_groups = std::ceil(static_cast<double>(cluster.prefill_nodes) / group_nodes);
  if (r.jct_s > 0) r.prefill_busy_fraction = prefill_busy_s_ / (pe_groups * r.jct_s);
  CollectDecodeSeries(cluster.des.size(), windows, &r);
  // The agent that finished last (first such agent on a tie): the run's critical path.
  size_t last = agent_sums_.size();
  double last_finish = r.last_agent.finish_s;
  for (size_t i = 0; i < agent_sums_.size(); ++i) {
    if (agent_sums_[i].finish_s > last_finish) {
      last = i;
      last_finish = agent_sums_[i].finish_s;
    }
  }
  if (last < agent_sums_.size()) {
    const AgentSums& s = agent_sums_[last];
    r.last_agent = agent_path_[last];
    r.last_agent.generated_tokens = s.generated_tokens;
    r.last_agent.finish_s = s.finish_s;
    r.last_agent.to_first_token_s = s.to_first_token_s;
    r.last_agent.decode_s = s.decode_s;
  }
  return r;
}

// Every series at one window width: the widest any of them reached on this run, widened further
// until [0, jct) fits in TimeBins::kMaxWindows windows (memory bounded by the workload, not by
// simulated time; time_bins.h). Returns the width.
double SimMetrics::CoarsenSeries(ClusterState& cluster, double jct_s) {
  std::vector<TimeBins*> series = {&dec_batch_time_, &dec_active_time_, &dec_tau_time_};
  for (StorageNic& nic : cluster.nics) series.push_back(&nic.bins());
  double width = cfg_.snic_window_s;
  for (const TimeBins* b : series) width = std::max(width, b->width());
  for (TimeBins* b : series) b->CoarsenTo(width, jct_s);
  return series.front()->width();
}

// Storage NIC utilization per window and its balance over the loaded phase (paper Figure 13 shows
// the early, busy part). Per window, the busiest NIC's traffic over the mean NIC traffic,
// summarized traffic-weighted (sum of maxima / sum of means): nearly idle windows, where one small
// read makes any ratio, weigh as little as the traffic they carry. The plain mean of per-window
// ratios is reported too.
void SimMetrics::CollectSnic(const ClusterState& cluster, double snic_bytes_per_s, size_t windows,
                             SimResult* r) const {
  const double phase_end = cfg_.balance_phase_fraction * r->jct_s;
  const size_t nodes = cluster.nics.size();
  const double width = r->window_s;
  r->snic_util.assign(nodes, std::vector<float>(windows, 0.0f));
  double max_sum = 0, avg_sum = 0, ratio_sum = 0;
  size_t ratio_n = 0;
  const double per_window = snic_bytes_per_s * width;
  for (size_t w = 0; w < windows; ++w) {
    double mx = 0, total = 0;
    for (size_t n = 0; n < nodes; ++n) {
      const auto& wb = cluster.nics[n].window_bytes();
      const double b = w < wb.size() ? wb[w] : 0;
      r->snic_util[n][w] = static_cast<float>(b / per_window);
      mx = std::max(mx, b);
      total += b;
    }
    if (static_cast<double>(w + 1) * width <= phase_end && total > 0) {
      const double avg = total / static_cast<double>(nodes);
      max_sum += mx;
      avg_sum += avg;
      ratio_sum += mx / avg;
      ratio_n++;
    }
  }
  r->snic_max_over_avg = avg_sum > 0 ? max_sum / avg_sum : 0;
  r->snic_max_over_avg_unweighted = ratio_n ? ratio_sum / static_cast<double>(ratio_n) : 0;
  for (size_t n = 0; n < nodes; ++n) {
    r->snic_read_bytes += cluster.nics[n].total_read_bytes();
    r->node_is_prefill.push_back(n < cluster.prefill_nodes);
  }
  if (r->jct_s > 0) {
    r->snic_avg_utilization =
        r->snic_read_bytes / (static_cast<double>(nodes) * snic_bytes_per_s * r->jct_s);
  }
}

// Attention balance across each prefill EP group, over the first 5% of the run (Figure 14).
double SimMetrics::AttentionBalance(double jct_s) const {
  double a_sum = 0;
  size_t a_n = 0;
  for (const auto& [time, ratio] : attn_ratio_) {
    if (time <= 0.05 * jct_s) {
      a_sum += ratio;
      a_n++;
    }
  }
  return a_n ? a_sum / static_cast<double>(a_n) : 0;
}

// Decode batch and step time per window (the decode groups are idle once every request is done).
void SimMetrics::CollectDecodeSeries(size_t decode_gpus, size_t windows, SimResult* r) const {
  const double de_gpus = static_cast<double>(decode_gpus);
  const double width = r->window_s;
  r->decode_batch_per_gpu.assign(windows, 0.0f);
  r->decode_step_ms.assign(windows, 0.0f);
  const std::vector<double>& batch_time = dec_batch_time_.values();
  const std::vector<double>& active_time = dec_active_time_.values();
  const std::vector<double>& tau_time = dec_tau_time_.values();
  for (size_t w = 0; w < windows && w < batch_time.size(); ++w) {
    r->decode_batch_per_gpu[w] = static_cast<float>(batch_time[w] / (width * de_gpus));
    if (active_time[w] > 0) {
      r->decode_step_ms[w] = static_cast<float>(1e3 * tau_time[w] / active_time[w]);
    }
  }
}

}  // namespace dualpath::sim
