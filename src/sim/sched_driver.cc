#include "sim/sched_driver.h"

#include <array>
#include <cmath>

namespace dualpath::sim {

sched::SchedConfig SchedConfigFor(SystemKind system, const SimConfig& config, double alpha_tokens,
                                  double beta_tokens) {
  sched::SchedConfig s;
  switch (system) {
    case SystemKind::kBasic:
      s = sched::SchedConfig::Basic();
      break;
    case SystemKind::kLayerwise:
      s = sched::SchedConfig::Basic();
      s.layerwise_prefill = true;
      break;
    case SystemKind::kDualPathRr:
      s = sched::SchedConfig::DualPathRoundRobinSide();
      break;
    case SystemKind::kDualPath:
    case SystemKind::kOracle:
      s = sched::SchedConfig::DualPath();
      break;
    case SystemKind::kDualPathSplit:
      s = sched::SchedConfig::DualPath();
      s.split_reads = true;
      break;
  }
  s.short_read_queue_tokens = std::max<int64_t>(1, std::llround(alpha_tokens));
  s.unfinished_token_limit = std::max<int64_t>(1, std::llround(beta_tokens));
  s.compute_quota = static_cast<Nanos>(config.engine.compute_quota_ms * 1e6);
  s.block_tokens = config.engine.block_tokens;
  return s;
}

sched::AttentionTimeModel FitAttentionModel(const CostModel& cost) {
  // Normal equations for t(c, n) ~ a*n + b*n*c + d*n^2 over a grid of agentic shapes.
  std::array<std::array<double, 3>, 3> m{};
  std::array<double, 3> v{};
  for (double c : {0.0, 4096.0, 16384.0, 32768.0, 65536.0}) {
    for (double n : {64.0, 256.0, 1024.0, 4096.0}) {
      const double t =
          cost.PrefillAttentionTime(static_cast<uint64_t>(c), static_cast<uint64_t>(n)) * 1e9;
      // Relative weighting (divide by t) so small chunks fit as well as big ones.
      const double wgt = 1.0 / std::max(t, 1.0);
      const std::array<double, 3> x = {n, n * c, n * n};
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) m[i][j] += wgt * wgt * x[i] * x[j];
        v[i] += wgt * wgt * x[i] * t;
      }
    }
  }
  // Gaussian elimination (3x3, well conditioned after the weighting).
  for (int col = 0; col < 3; ++col) {
    for (int row = col + 1; row < 3; ++row) {
      const double f = m[row][col] / m[col][col];
      for (int k = col; k < 3; ++k) m[row][k] -= f * m[col][k];
      v[row] -= f * v[col];
    }
  }
  std::array<double, 3> x{};
  for (int row = 2; row >= 0; --row) {
    double s = v[row];
    for (int k = row + 1; k < 3; ++k) s -= m[row][k] * x[k];
    x[row] = s / m[row][row];
  }
  sched::AttentionTimeModel model;
  model.per_token_ns = std::max(0.0, x[0]);
  model.per_cached_pair_ns = std::max(0.0, x[1]);
  model.per_token_sq_ns = std::max(0.0, x[2]);
  return model;
}

Result<std::unique_ptr<SchedDriver>> SchedDriver::Create(const ClusterState& c,
                                                         const sched::SchedConfig& config) {
  sched::UniformClusterSpec spec;
  spec.prefill_nodes = static_cast<int>(c.prefill_nodes);
  spec.decode_nodes = static_cast<int>(c.decode_nodes);
  spec.gpus_per_node = static_cast<int>(c.gpus_per_node);
  ASSIGN_OR_RETURN(sched::ClusterDesc desc, sched::MakeUniformCluster(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<sched::Scheduler> s, sched::Scheduler::Create(desc, config));
  std::unique_ptr<SchedDriver> d(new SchedDriver(std::move(s)));
  d->group_engines_.resize(static_cast<size_t>(desc.num_groups()));
  for (const sched::EngineDesc& e : desc.engines) {
    d->group_engines_[e.group.value()].push_back(e.id.value());
  }
  for (uint32_t gi = 0; gi < d->group_engines_.size(); ++gi) {
    const sched::GroupId g(gi);
    (d->sched_->group_role(g) == sched::Role::kDecode ? d->decode_groups_ : d->prefill_groups_)
        .push_back(g);
  }
  return d;
}

Status SchedDriver::Submit(uint32_t slot, uint64_t prompt, uint64_t hit, uint64_t gen) {
  sched::SchedRequest r;
  r.id = RequestId(slot);
  r.session = SessionId(slot);
  r.prompt_tokens = static_cast<int64_t>(prompt);
  r.hit_tokens = static_cast<int64_t>(hit);
  r.expected_gen_tokens = static_cast<int64_t>(gen);
  return sched_->Submit(r);
}

// Engine ids: PEs are 0..P*g-1 (ClusterState::pes order), DEs follow (ClusterState::des order);
// node ids equal ClusterState::nics indices. Both follow MakeUniformCluster's numbering.
sched::EngineReport SchedDriver::Report(const ClusterState& c, uint32_t engine, double now) const {
  sched::EngineReport r;
  r.engine = EngineId(engine);
  const auto num_pes = static_cast<uint32_t>(c.pes.size());
  uint32_t nic;
  if (engine < num_pes) {
    const PeState& p = c.pes[engine];
    r.unfinished_requests = p.requests;
    r.unfinished_tokens = static_cast<int64_t>(p.tokens);
    nic = p.node;
  } else {
    const DeState& d = c.des[engine - num_pes];
    r.unfinished_requests = d.requests;
    r.unfinished_tokens = static_cast<int64_t>(d.tokens);
    r.hbm_free_tokens = static_cast<int64_t>(std::max(0.0, d.hbm_free) / c.kv_bytes_per_token);
    nic = d.node;
  }
  r.read_queue_tokens = static_cast<int64_t>(c.ReadQueueTokens(nic, now));
  return r;
}

Status SchedDriver::FetchAll(const ClusterState& c, double now,
                             std::vector<sched::DecodeAssignment>* decode,
                             std::vector<sched::Assignment>* prefill) {
  // Groups fetch "regularly" and independently in the paper; fetching them in a fixed order would
  // hand the head of the FIFO to group 0 every time. Rotating the first group spreads that
  // advantage evenly, as staggered fetch timers would.
  ++round_;
  for (const auto* groups : {&decode_groups_, &prefill_groups_}) {
    const size_t n = groups->size();
    for (size_t k = 0; k < n; ++k) {
      const sched::GroupId g = (*groups)[(round_ + k) % n];
      reports_.clear();
      for (uint32_t e : group_engines_[g.value()]) reports_.push_back(Report(c, e, now));
      out_.Clear();
      RETURN_IF_ERROR(sched_->FetchForGroup(g, reports_, &out_));
      decode->insert(decode->end(), out_.decode.begin(), out_.decode.end());
      prefill->insert(prefill->end(), out_.prefill.begin(), out_.prefill.end());
    }
  }
  return Status::Ok();
}

}  // namespace dualpath::sim
