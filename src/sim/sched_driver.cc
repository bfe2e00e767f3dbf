#include "sim/sched_driver.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "dualpath/common/check.h"

namespace dualpath::sim {

SchedThresholds DeriveThresholds(const SimConfig& config, const CostModel& cost,
                                 const SimWorkload& workload) {
  double hit_sum = 0, prompt_sum = 0;
  for (const SimTurn& t : workload.turns) {
    hit_sum += t.hit;
    prompt_sum += t.prompt;
  }
  const double n_turns = static_cast<double>(workload.turns.size());
  const auto mean_hit = static_cast<uint64_t>(hit_sum / n_turns);
  const auto mean_new =
      std::max<uint64_t>(1, static_cast<uint64_t>((prompt_sum - hit_sum) / n_turns));
  const double attn = cost.PrefillAttentionTime(mean_hit, mean_new);
  const double per_batch = std::max(1.0, config.engine.compute_quota_ms * 1e-3 / attn);
  const double batch_tokens = per_batch * static_cast<double>(mean_new);
  const double per_req = attn + cost.PrefillLinearTime(batch_tokens) / per_batch;
  const double pe_prompt_tokens_per_s = (prompt_sum / n_turns) / per_req;
  SchedThresholds t;
  t.alpha_tokens =
      config.sched.short_read_queue_s * cost.snic_bytes_per_s() / cost.kv_bytes_per_token();
  t.beta_tokens = config.sched.unfinished_token_limit_s * pe_prompt_tokens_per_s;
  return t;
}

sched::SchedConfig SchedConfigFor(SystemKind system, const SimConfig& config,
                                  const SchedThresholds& thresholds) {
  sched::SchedConfig s = sched::PresetFor(system);
  s.short_read_queue_tokens = std::max<int64_t>(1, std::llround(thresholds.alpha_tokens));
  s.unfinished_token_limit = std::max<int64_t>(1, std::llround(thresholds.beta_tokens));
  s.compute_quota = static_cast<Nanos>(config.engine.compute_quota_ms * 1e6);
  s.block_tokens = config.engine.block_tokens;
  return s;
}

sched::AttentionTimeModel FitAttentionModel(const CostModel& cost) {
  // Weighted least squares for t(c, n) ~ a*n + b*n*c + d*n^2 over agentic shapes (c >= 2K: DSA
  // attention saturates at its top-k there, which a quadratic form cannot follow below it). The
  // features are scaled to similar magnitudes (the raw n*c and n values differ by 10^8, which
  // would leave the normal equations singular in double precision), and each point is weighted
  // by 1/t so small chunks are fitted as well as big ones. A coefficient that comes out negative
  // is dropped and the rest refitted (sched requires all >= 0 for its binary search).
  constexpr double kScale[3] = {1e3, 1e7, 1e6};
  bool use[3] = {true, true, true};
  std::array<double, 3> x{};
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::array<std::array<double, 3>, 3> m{};
    std::array<double, 3> v{};
    for (double c : {2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0}) {
      for (double n : {64.0, 128.0, 512.0, 1024.0, 2048.0, 4096.0}) {
        const double t =
            cost.PrefillAttentionTime(static_cast<uint64_t>(c), static_cast<uint64_t>(n)) * 1e9;
        const double w2 = 1.0 / std::max(t * t, 1.0);
        const std::array<double, 3> f = {n / kScale[0], n * c / kScale[1], n * n / kScale[2]};
        for (int i = 0; i < 3; ++i) {
          for (int j = 0; j < 3; ++j) m[i][j] += w2 * f[i] * f[j];
          v[i] += w2 * f[i] * t;
        }
      }
    }
    for (int i = 0; i < 3; ++i) {
      if (!use[i]) {  // pin a dropped coefficient to zero
        for (int j = 0; j < 3; ++j) m[i][j] = m[j][i] = 0;
        m[i][i] = 1;
        v[i] = 0;
      }
    }
    for (int col = 0; col < 3; ++col) {  // Gaussian elimination with partial pivoting
      int piv = col;
      for (int row = col + 1; row < 3; ++row) {
        if (std::abs(m[row][col]) > std::abs(m[piv][col])) piv = row;
      }
      std::swap(m[col], m[piv]);
      std::swap(v[col], v[piv]);
      for (int row = col + 1; row < 3; ++row) {
        const double f = m[row][col] / m[col][col];
        for (int k = col; k < 3; ++k) m[row][k] -= f * m[col][k];
        v[row] -= f * v[col];
      }
    }
    for (int row = 2; row >= 0; --row) {
      double acc = v[row];
      for (int k = row + 1; k < 3; ++k) acc -= m[row][k] * x[k];
      x[row] = acc / m[row][row];
    }
    bool negative = false;
    for (int i = 0; i < 3; ++i) {
      if (use[i] && x[i] < 0) {
        use[i] = false;
        negative = true;
      }
    }
    if (!negative) break;
  }
  sched::AttentionTimeModel model;
  model.per_token_ns = use[0] ? std::max(0.0, x[0]) / kScale[0] : 0;
  model.per_cached_pair_ns = use[1] ? std::max(0.0, x[1]) / kScale[1] : 0;
  model.per_token_sq_ns = use[2] ? std::max(0.0, x[2]) / kScale[2] : 0;
  return model;
}

Result<std::unique_ptr<SchedDriver>> SchedDriver::Create(const ClusterState& c, SystemKind system,
                                                         const sched::SchedConfig& config) {
  sched::UniformClusterSpec spec;
  spec.prefill_nodes = static_cast<int>(c.prefill_nodes);
  spec.decode_nodes = static_cast<int>(c.decode_nodes);
  spec.gpus_per_node = static_cast<int>(c.gpus_per_node);
  ASSIGN_OR_RETURN(sched::ClusterDesc desc, sched::MakeUniformCluster(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<sched::Scheduler> s, sched::Scheduler::Create(desc, config));
  std::unique_ptr<SchedDriver> d(new SchedDriver(std::move(s), system));
  d->group_engines_.resize(static_cast<size_t>(desc.num_groups()));
  d->group_.assign(static_cast<size_t>(desc.num_groups()), GroupInfo{});
  d->engine_group_.resize(desc.engines.size());
  d->engine_bit_.resize(desc.engines.size());
  for (const sched::EngineDesc& e : desc.engines) {
    std::vector<uint32_t>& members = d->group_engines_[e.group.value()];
    d->engine_bit_[e.id.value()] = static_cast<uint32_t>(members.size());
    members.push_back(e.id.value());
    d->engine_group_[e.id.value()] = e.group.value();
    if (e.id.value() < c.pes.size()) d->group_[e.group.value()].prefill = 1;
  }
  for (size_t g = 0; g < d->group_engines_.size(); ++g) {
    const size_t words = (d->group_engines_[g].size() + 63) / 64;
    DUALPATH_CHECK(words <= UINT16_MAX, "SchedDriver: a group with too many engines");
    d->group_[g].dirty_word = static_cast<uint32_t>(d->dirty_words_.size());
    d->group_[g].dirty_words = static_cast<uint16_t>(words);
    d->dirty_words_.resize(d->dirty_words_.size() + words, 0);
  }
  for (const sched::EngineDesc& e : desc.engines) d->MarkDirty(e.id.value());
  return d;
}

Status SchedDriver::Submit(uint32_t slot, uint64_t prompt, uint64_t hit, uint64_t gen,
                           std::optional<uint32_t> prefill_engine) {
  sched::SchedRequest r;
  r.id = RequestId(slot);
  r.session = SessionId(slot);
  r.prompt_tokens = static_cast<int64_t>(prompt);
  // The Oracle rule (sched/system.h): the scheduler sees no hit tokens to place.
  r.hit_tokens = sched::SchedHitTokens(system_, static_cast<int64_t>(hit));
  r.expected_gen_tokens = static_cast<int64_t>(gen);
  if (prefill_engine.has_value()) r.prefill_engine = EngineId(*prefill_engine);
  return sched_->Submit(r);
}

// Engine ids: PEs are 0..P*g-1 (ClusterState::pes order), DEs follow (ClusterState::des order);
// node ids equal ClusterState::nics indices. Both follow MakeUniformCluster's numbering.
void SchedDriver::FillReport(const ClusterState& c, uint32_t engine, int64_t read_queue_tokens,
                             sched::EngineReport* out) const {
  sched::EngineReport& r = *out;
  r = sched::EngineReport{};
  r.engine = EngineId(engine);
  const auto num_pes = static_cast<uint32_t>(c.pes.size());
  if (engine < num_pes) {
    const PeState& p = c.pes[engine];
    r.unfinished_requests = p.requests;
    r.unfinished_tokens = static_cast<int64_t>(p.tokens);
  } else {
    const DeState& d = c.des[engine - num_pes];
    r.unfinished_requests = d.requests;
    r.unfinished_tokens = static_cast<int64_t>(d.tokens);
    r.hbm_free_tokens = static_cast<int64_t>(std::max(0.0, d.hbm_free) / c.kv_bytes_per_token);
  }
  r.read_queue_tokens = read_queue_tokens;
}

uint32_t SchedDriver::NodeOf(const ClusterState& c, uint32_t engine) {
  const auto num_pes = static_cast<uint32_t>(c.pes.size());
  return engine < num_pes ? c.pes[engine].node : c.des[engine - num_pes].node;
}

namespace {

// Every node's current storage-NIC queue, read by the scheduler only for the decode nodes a
// prefill fetch places requests on (sched::NodeReadQueueSource).
class LiveReadQueues final : public sched::NodeReadQueueSource {
 public:
  LiveReadQueues(const ClusterState& c, double now) : c_(c), now_(now) {}
  int64_t ReadQueueTokens(NodeId node) const override {
    return static_cast<int64_t>(c_.ReadQueueTokens(node.value(), now_));
  }

 private:
  const ClusterState& c_;
  double now_;
};

}  // namespace

// A fetch that provably changes nothing the scheduler will later read is not made (issue 27: most
// of a 48P96D run's fetch ticks find nothing to place, and the reports were the largest cost
// left). What a fetch does (docs/sched.md): apply the group's reports, then place. It places
// nothing when its queue is empty (a prefill group: the prefill queue; a decode group: the global
// queue, which any decode fetch drains, and its private queue). The reports it applies are read
// later only as follows (the simulator always passes live decode-node queues):
// - a prefill group's engine loads and node queues only by the group's own next fetch, which
//   applies fresh reports first (load_tokens deltas telescope);
// - a decode group's node queues never (a prefill fetch reads a decode node's queue live);
// - a decode group's engine loads by its own next fetch and by every drain of the global queue
//   (phase 1 reads each decode group's load_tokens): a skipped fetch must leave them as they
//   would be, so it is skipped only while no engine of the group changed since the scheduler last
//   had its reports (GroupDirty), when applying them again would write the same values.
// A decode group's fetch also places nothing when its private queue is blocked: its last fetch
// stopped at a head request no DE of the group had the free HBM for (phase 2 places until then),
// and nothing changed since: the head is the same (only the group's own fetches pop its private
// queue; drains append at the back) and, the group not being dirty, so is every DE's free HBM in
// the scheduler's view. Phase 2 would fail on the same head again. (At 48P96D with 48K agents these
// were a third of the fetches that still called the scheduler; sched's de_fetch_no_hbm counter
// then counts only the fetches made.)
// scheduler_property_test / sched_driver_test run the same inputs with and without the skip.
bool SchedDriver::IdleFetch(uint32_t group) const {
  if (!skip_idle_) return false;
  const GroupInfo& info = group_[group];
  if (info.prefill != 0) return sched_->prefill_queue_empty();
  return !GroupDirty(group) && sched_->global_queue_empty() &&
         (info.blocked != 0 || sched_->private_queue_empty(sched::GroupId(group)));
}

Status SchedDriver::FetchGroup(uint32_t group, const ClusterState& c, double now,
                               sched::FetchResult* out) {
  out->Clear();
  // The engines of a node share its storage NIC: its queue is computed once per node (engines
  // are in node order, MakeUniformCluster's numbering). Reports are written in place: returning
  // each by value and copying it in stalled on the copy (a fifth of a fetch tick, perf).
  // A decode engine whose load did not change since its last report (not dirty) is not reported:
  // its report would write the values the scheduler holds (a zero change of its group's load) and
  // its node's read queue, which sched never reads for a decode node here (prefill fetches read
  // decode-node queues live). At 48P96D a decode fetch is mostly made because one completion
  // dirtied one engine of eight (issue 27).
  const std::vector<uint32_t>& engines = group_engines_[group];
  const bool prefill_group = group_[group].prefill != 0;
  const size_t words = DirtyWordCount(group);
  uint64_t* dirty = DirtyWords(group);
  reports_.resize(engines.size());
  size_t sent = 0;
  if (!prefill_group && skip_idle_) {
    // A decode engine's report carries its node's queue as 0 (not computed): the scheduler reads
    // a decode node's queue only in a prefill fetch, which reads it live first (LiveReadQueues,
    // sched's RefreshNodeQueue), so the reported value is never read (issue 27: a storage-NIC
    // queue computation per decode report). Only the dirty engines report, in group order.
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t bits = dirty[w]; bits != 0; bits &= bits - 1) {
        FillReport(c, engines[w * 64 + static_cast<size_t>(std::countr_zero(bits))], 0,
                   &reports_[sent++]);
      }
    }
    unsent_reports_ += engines.size() - sent;
  } else {
    // Every engine reports, with its node's queue (computed once per node: the engines of a
    // node are consecutive).
    uint32_t node = UINT32_MAX;
    int64_t queue = 0;
    for (const uint32_t e : engines) {
      const uint32_t n = NodeOf(c, e);
      if (n != node) {
        node = n;
        queue = static_cast<int64_t>(c.ReadQueueTokens(n, now));
      }
      FillReport(c, e, queue, &reports_[sent++]);
    }
  }
  reports_.resize(sent);
  if (prefill_group) {
    // The read side (§6.1) compares the PE node's queue, which this group reports, with the DE
    // node's. A decode node's queue otherwise reaches sched only when its own group fetches, and
    // in between sched's view keeps every read it placed there but none of the draining: it
    // overstates DE queues and tilts reads to the prefill nodes. A real scheduler sees each
    // node's storage-NIC telemetry; give it the current decode-node queues, read when it needs
    // one (the same decisions as applying every decode node's queue before the fetch, without a
    // write per decode node per fetch: that was a third of a 48P96D run).
    const LiveReadQueues live(c, now);
    RETURN_IF_ERROR(sched_->FetchForGroup(sched::GroupId(group), reports_, out, &live));
  } else {
    RETURN_IF_ERROR(sched_->FetchForGroup(sched::GroupId(group), reports_, out));
    // Clean: the scheduler holds exactly the engines' loads, unless it placed requests, which the
    // simulation then adds to the engines in its own units (bytes of HBM, rounded differently).
    if (words == 1) {
      // The usual group of at most 64 engines: its word built in a register and stored once (the
      // clear and a read-modify-write per assignment stalled on each other: perf).
      uint64_t bits = 0;
      for (const sched::DecodeAssignment& a : out->decode)
        bits |= uint64_t{1} << engine_bit_[a.decode.value()];
      dirty[0] = bits;
    } else {
      for (size_t w = 0; w < words; ++w) dirty[w] = 0;
      for (const sched::DecodeAssignment& a : out->decode) SetDirty(dirty, a.decode.value());
    }
    group_[group].blocked = sched_->private_queue_empty(sched::GroupId(group)) ? 0 : 1;
  }
  return Status::Ok();
}

}  // namespace dualpath::sim
