// AttentionFit: fits the §6.2 attention time model (sched::AttentionTimeModel, batch.h) to an
// engine's own measured attention times, so that PackRanks balances the ranks by the times the
// ranks actually take rather than by a model fitted once elsewhere (DualPath §6.2: "the
// relationship between theoretical computation and wall-clock time depends on hardware and
// parallel configuration, and can be fitted in advance through profiling").
//
// A sample is one rank's work in one measured forward batch - the (cached, bsz) pairs of the
// chunks placed on it, summed into RankWork's features - and the time that rank's attention
// took. The fit is least squares on relative error (each sample weighted by 1/measured², so a
// small batch counts as much as a large one: balance is a ratio), with every coefficient >= 0
// (PackBatch's binary search needs time monotone in bsz): non-negative least squares solved
// exactly by trying every subset of the six coefficients (63 small systems) and keeping the
// feasible solution of least residual. Older samples fade geometrically (`forget`), so the model
// follows slow drift in the machine (load, frequency) without being thrown by one noisy batch.
//
// Pure computation, no clock. Thread safety: none; one owner (the PE's compute thread).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "dualpath/sched/batch.h"

namespace dualpath::sched {

// The features of the chunks one rank computes in one batch.
struct RankWork {
  double chunks = 0;     // entries with bsz > 0
  double tokens = 0;     // Σ bsz
  double pairs = 0;      // Σ bsz·cached
  double sq = 0;         // Σ bsz²
  double pairs_ctx = 0;  // Σ bsz·cached²
  void Add(int64_t cached, int64_t bsz);
  bool empty() const { return chunks == 0; }
  // The model's time for this rank: fixed_ns (a busy rank) plus ItemNs of each chunk.
  double PredictNs(const AttentionTimeModel& m) const;
};

// Per-rank features of a plan over `queue` (PackBatch / PackRanks output): one RankWork per rank
// (`ranks` entries; entry ranks must be < ranks, checked).
void RankWorkOf(std::span<const PrefillWork> queue, const BatchPlan& plan, uint32_t ranks,
                std::span<RankWork> out);

class AttentionFit {
 public:
  // forget in (0, 1]: each new sample multiplies the weight of all earlier ones by it (1: keep
  // everything equally). Checked (abort: a caller bug).
  explicit AttentionFit(double forget = 1.0);

  // One rank's measured attention time (ns, > 0; other samples are ignored: an idle rank or a
  // clock that did not advance says nothing about the model) for the work `w` (non-empty).
  void Add(const RankWork& w, double measured_ns);

  // Samples added (not decayed; the count the caller can gate on).
  uint64_t samples() const { return samples_; }

  // The least-squares model (all coefficients >= 0). false when no subset of coefficients gives
  // a non-degenerate fit with some positive per-work term (too few or too similar samples); *out
  // is then unchanged.
  bool Fit(AttentionTimeModel* out) const;

 private:
  // fixed, per_chunk, per_token, per_cached_pair, per_token_sq, per_cached_pair_ctx
  static constexpr int kTerms = 6;
  const double forget_;
  std::array<std::array<double, kTerms>, kTerms> xtx_{};  // Σ w·x·xᵀ (w = 1 / measured²)
  std::array<double, kTerms> xty_{};                      // Σ w·x·y
  double yty_ = 0;                                        // Σ w·y² (= Σ weights' decay)
  uint64_t samples_ = 0;
};

}  // namespace dualpath::sched
