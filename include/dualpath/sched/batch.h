// Intra-engine scheduling of DualPath §6.2: which of a PE's waiting requests go into the next
// forward batch.
//
// Each request is a pair (cached, bsz): `cached` tokens already have KV-cache (storage hits plus
// chunks computed by earlier forward passes) and `bsz` tokens need KV computed. Requests are packed
// in FIFO order while the predicted attention-layer time stays within the compute quota; the first
// request that does not fit whole gets a smaller bsz' found by binary search (chunked prefill) and
// closes the batch. Equal attention times across data-parallel attention GPUs keep the bubbles
// before the shared FFN stage small (Figure 14's max/avg 1.06).
//
// The time model is fitted offline by the caller (profiling, as the paper and PrefillOnly /
// Sarathi-Serve do):
//   time = fixed_ns + Σ_i ( per_token_ns·bsz_i + per_cached_pair_ns·bsz_i·cached_i
//                           + per_token_sq_ns·bsz_i² )
// (linear projections per new token, attention of new tokens over cached ones, and the causal
// triangle among new tokens). All coefficients are >= 0, so time is monotone in every bsz_i, which
// is what makes the binary search valid.
//
// Pure functions; no allocation beyond growing `out`. Thread safety: reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"

namespace dualpath::sched {

struct AttentionTimeModel {
  double fixed_ns = 0;
  double per_token_ns = 0;
  double per_cached_pair_ns = 0;
  double per_token_sq_ns = 0;

  // Contribution of one (cached, bsz) pair, without fixed_ns.
  double ItemNs(int64_t cached, int64_t bsz) const {
    const double b = static_cast<double>(bsz);
    return per_token_ns * b + per_cached_pair_ns * b * static_cast<double>(cached) +
           per_token_sq_ns * b * b;
  }
  // kSchedBadConfig naming a negative or non-finite coefficient.
  Status Validate() const;
};

// One waiting request on the PE, in FIFO order.
struct PrefillWork {
  int64_t cached_tokens = 0;     // KV already available (hits + earlier chunks), >= 0
  int64_t remaining_tokens = 0;  // tokens still to compute, > 0
};

struct BatchLimits {
  Nanos compute_quota = 300 * kNanosPerMilli;  // §6.2 / A.4
  int64_t min_chunk_tokens = 64;               // see SchedConfig::min_chunk_tokens
  // 0 = no limit. Without layerwise prefill the batch's whole KV (Σ cached + bsz) must fit in HBM:
  // pass the PE's HBM KV capacity in tokens here.
  int64_t max_batch_kv_tokens = 0;
};

// One entry of a planned batch: compute `bsz` tokens of queue[index].
struct BatchEntry {
  uint32_t index = 0;
  int64_t bsz = 0;
  bool chunked = false;  // bsz < remaining_tokens (chunked prefill)
};

struct BatchPlan {
  std::vector<BatchEntry> entries;
  double predicted_ns = 0;  // the model's time for the planned batch (incl. fixed_ns)
  int64_t tokens = 0;       // Σ bsz
  void Clear() {
    entries.clear();
    predicted_ns = 0;
    tokens = 0;
  }
};

// Plans the next forward batch over `queue` (FIFO). Clears `out` first. Rules:
//  - add whole requests while the predicted time stays <= quota (and KV tokens <= the limit);
//  - the first request that does not fit whole gets the largest bsz' (binary search) that fits;
//    it is included if bsz' >= min_chunk_tokens, and the batch closes either way;
//  - progress: if the queue's head does not fit even partly, it is scheduled anyway with
//    min(remaining, min_chunk_tokens) tokens (a forward pass over the quota beats a stall);
//    an empty queue gives an empty plan.
// kInvalidArgument for a malformed queue entry, kSchedBadConfig for a bad model or limits,
// kResourceExhausted when the head's whole prompt (cached + remaining) exceeds
// max_batch_kv_tokens: it could never finish, so the caller must not admit such a request to a
// non-layerwise PE (sched::CheckTooLong, types.h). A head that fits the limit always progresses.
Status PackBatch(std::span<const PrefillWork> queue, const AttentionTimeModel& model,
                 const BatchLimits& limits, BatchPlan* out);

}  // namespace dualpath::sched
