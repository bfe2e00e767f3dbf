#include "dualpath/sched/attention_fit.h"

#include <cmath>
#include <limits>
#include <utility>

#include "dualpath/common/check.h"

namespace dualpath::sched {

void RankWork::Add(int64_t cached, int64_t bsz) {
  if (bsz <= 0) return;
  const double b = static_cast<double>(bsz);
  chunks += 1;
  tokens += b;
  pairs += b * static_cast<double>(cached);
  sq += b * b;
  pairs_ctx += b * static_cast<double>(cached) * static_cast<double>(cached);
}

double RankWork::PredictNs(const AttentionTimeModel& m) const {
  if (empty()) return 0;
  return m.fixed_ns + m.per_chunk_ns * chunks + m.per_token_ns * tokens +
         m.per_cached_pair_ns * pairs + m.per_token_sq_ns * sq +
         m.per_cached_pair_ctx_ns * pairs_ctx;
}

void RankWorkOf(std::span<const PrefillWork> queue, const BatchPlan& plan, uint32_t ranks,
                std::span<RankWork> out) {
  DUALPATH_CHECK(out.size() == ranks, "RankWorkOf: out must hold one entry per rank");
  for (RankWork& w : out) w = RankWork{};
  for (const BatchEntry& e : plan.entries) {
    DUALPATH_CHECK(e.rank < ranks && e.index < queue.size(),
                   "RankWorkOf: an entry's rank or index is out of range");
    out[e.rank].Add(queue[e.index].cached_tokens, e.bsz);
  }
}

AttentionFit::AttentionFit(double forget) : forget_(forget) {
  DUALPATH_CHECK(forget > 0 && forget <= 1, "AttentionFit: forget must be in (0, 1]");
}

void AttentionFit::Add(const RankWork& w, double measured_ns) {
  if (w.empty() || !(measured_ns > 0) || !std::isfinite(measured_ns)) return;
  // Relative error: weight 1/y², so the normal equations are those of (x/y)·β ≈ 1.
  const std::array<double, kTerms> x = {1.0 / measured_ns,      w.chunks / measured_ns,
                                        w.tokens / measured_ns, w.pairs / measured_ns,
                                        w.sq / measured_ns,     w.pairs_ctx / measured_ns};
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j) xtx_[i][j] = forget_ * xtx_[i][j] + x[i] * x[j];
    xty_[i] = forget_ * xty_[i] + x[i];  // y/y = 1
  }
  yty_ = forget_ * yty_ + 1.0;
  ++samples_;
}

bool AttentionFit::Fit(AttentionTimeModel* out) const {
  if (samples_ < static_cast<uint64_t>(kTerms)) return false;
  // Exact non-negative least squares over six terms: the NNLS optimum is the unconstrained
  // optimum over its own support, so trying every support and keeping the best feasible one finds
  // it. Each system is Jacobi-scaled (unit diagonal): the raw features differ by ~10^6 (chunks vs
  // bsz·cached), which would leave the elimination's pivots meaningless in double precision.
  double best_ssr = std::numeric_limits<double>::infinity();
  std::array<double, kTerms> best{};
  bool found = false;
  for (int mask = 1; mask < (1 << kTerms); ++mask) {
    if ((mask & ~1) == 0) continue;  // fixed_ns alone predicts no dependence on the work
    int idx[kTerms] = {};
    int n = 0;
    bool usable = true;
    for (int i = 0; i < kTerms; ++i) {
      if ((mask >> i & 1) == 0) continue;
      if (!(xtx_[i][i] > 0)) usable = false;  // a feature that was always 0: nothing to fit
      idx[n++] = i;
    }
    if (!usable) continue;
    double a[kTerms][kTerms + 1] = {};
    double d[kTerms] = {};
    for (int r = 0; r < n; ++r) d[r] = std::sqrt(xtx_[idx[r]][idx[r]]);
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) a[r][c] = xtx_[idx[r]][idx[c]] / (d[r] * d[c]);
      a[r][n] = xty_[idx[r]] / d[r];
    }
    // Gaussian elimination with partial pivoting; a pivot near 0 on the unit-diagonal system
    // means collinear features (e.g. every busy rank had exactly one chunk): skip this support.
    bool singular = false;
    for (int c = 0; c < n && !singular; ++c) {
      int piv = c;
      for (int r = c + 1; r < n; ++r) {
        if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
      }
      if (std::abs(a[piv][c]) < 1e-9) {
        singular = true;
        break;
      }
      for (int k = 0; k <= n; ++k) std::swap(a[c][k], a[piv][k]);
      for (int r = c + 1; r < n; ++r) {
        const double f = a[r][c] / a[c][c];
        for (int k = c; k <= n; ++k) a[r][k] -= f * a[c][k];
      }
    }
    if (singular) continue;
    double z[kTerms] = {};
    for (int r = n - 1; r >= 0; --r) {
      double acc = a[r][n];
      for (int k = r + 1; k < n; ++k) acc -= a[r][k] * z[k];
      z[r] = acc / a[r][r];
    }
    std::array<double, kTerms> beta{};
    bool feasible = true;
    for (int r = 0; r < n; ++r) {
      beta[idx[r]] = z[r] / d[r];
      if (!(beta[idx[r]] >= 0) || !std::isfinite(beta[idx[r]])) feasible = false;
    }
    if (!feasible) continue;
    // Residual Σ w (y - x·β)² from the normal equations: yᵀy - 2 βᵀ(Xᵀy) + βᵀ(XᵀX)β.
    double ssr = yty_;
    for (int i = 0; i < kTerms; ++i) {
      ssr -= 2 * beta[i] * xty_[i];
      for (int j = 0; j < kTerms; ++j) ssr += beta[i] * xtx_[i][j] * beta[j];
    }
    if (ssr < best_ssr) {
      best_ssr = ssr;
      best = beta;
      found = true;
    }
  }
  // A model whose per-work terms are all 0 would let PackRanks put everything on one rank.
  if (!found || best[1] + best[2] + best[3] + best[4] + best[5] <= 0) return false;
  out->fixed_ns = best[0];
  out->per_chunk_ns = best[1];
  out->per_token_ns = best[2];
  out->per_cached_pair_ns = best[3];
  out->per_token_sq_ns = best[4];
  out->per_cached_pair_ctx_ns = best[5];
  return true;
}

}  // namespace dualpath::sched
