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
// The time model is fitted by the caller (profiling, as the paper and PrefillOnly / Sarathi-Serve
// do; an engine can also fit it to its own measured attention times with sched::AttentionFit,
// attention_fit.h):
//   time = fixed_ns + Σ_i ( per_chunk_ns + per_token_ns·bsz_i + per_cached_pair_ns·bsz_i·cached_i
//                           + per_token_sq_ns·bsz_i² + per_cached_pair_ctx_ns·bsz_i·cached_i² )
// (a chunk's own set-up, linear projections per new token, attention of new tokens over cached
// ones, the causal triangle among new tokens, and the extra cost per pair of a long prefix whose
// KV no longer stays in the cache). All coefficients are >= 0, so time is monotone
// in every bsz_i, which is what makes the binary search valid.
//
// Pure functions; no allocation beyond growing `out`. Thread safety: reentrant.
#pragma once

#include <algorithm>
#include <cstddef>
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
  // Per chunk (entry) of a batch with bsz > 0, on the rank that computes it. 0 unless fitted to
  // an engine's measurements; added last so that a model without it gives the same bits as before
  // (x + 0.0 == x: the simulator's results do not move).
  double per_chunk_ns = 0;
  // Per (new, cached) pair and cached token: a pair over a long prefix costs more than one over a
  // short one once the prefix's KV is streamed from memory rather than cache (one batch of the
  // reference model, dev build: ~40 ns per pair at 2,800 cached tokens, ~30 at ~600; the PE's fit
  // in docs/engine.md "Measured" gave 0.0065 ns, +19 ns per pair at 3,000). 0 unless fitted;
  // added last, like per_chunk_ns.
  double per_cached_pair_ctx_ns = 0;

  // Contribution of one (cached, bsz) pair, without fixed_ns.
  double ItemNs(int64_t cached, int64_t bsz) const {
    const double b = static_cast<double>(bsz);
    return per_token_ns * b + per_cached_pair_ns * b * static_cast<double>(cached) +
           per_token_sq_ns * b * b + (bsz > 0 ? per_chunk_ns : 0.0) +
           per_cached_pair_ctx_ns * b * static_cast<double>(cached) * static_cast<double>(cached);
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
  uint32_t rank = 0;     // PackRanks: the rank whose attention computes it (PackBatch: 0)
};

struct BatchPlan {
  std::vector<BatchEntry> entries;
  double predicted_ns = 0;  // the model's time for the planned batch (incl. fixed_ns)
  int64_t tokens = 0;       // Σ bsz
  // PackRanks: the predicted attention time of each rank (fixed_ns + its entries; 0 for a rank
  // with nothing to do). predicted_ns is then their maximum: the batch's attention stage ends
  // with its slowest rank. Empty from PackBatch.
  std::vector<double> rank_ns;
  // PackRanks kPacked: the per-rank level (without fixed_ns) the entries were placed at; every
  // rank's load is at most this unless the head alone exceeds it (progress). 0 otherwise.
  double level_ns = 0;
  void Clear() {
    entries.clear();
    predicted_ns = 0;
    tokens = 0;
    rank_ns.clear();
    level_ns = 0;
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

// PackBatch over a queue of `size` requests, `item(i)` giving queue[i], reading only the prefix
// PackBatch needs: it reads the queue in order and stops at the first request that does not fit
// whole (chunked or left out, the batch closes there), so its plan over any prefix reaching past
// that request is its plan over the whole queue. The prefix starts at `first_prefix` requests and
// doubles while the plan took every request of it whole. `work` is the caller's scratch (left
// holding the prefix). The same plan and status as PackBatch over all `size` requests
// (batch_test.cc). For callers whose queue is expensive to read in full (the simulator's ready
// queues: a cache miss per request, issue 27).
template <typename ItemFn>
Status PackBatchPrefix(size_t size, ItemFn item, const AttentionTimeModel& model,
                       const BatchLimits& limits, std::vector<PrefillWork>* work, BatchPlan* out,
                       size_t first_prefix = 16) {
  work->clear();
  size_t n = std::min(size, std::max<size_t>(1, first_prefix));
  for (;;) {
    for (size_t i = work->size(); i < n; ++i) work->push_back(item(i));
    RETURN_IF_ERROR(PackBatch(*work, model, limits, out));
    if (n == size || out->entries.size() < n || out->entries.back().chunked) return Status::Ok();
    n = std::min(size, 2 * n);
  }
}

// How PackRanks places the chunks of a forward batch on an engine's data-parallel attention ranks.
enum class RankPlacement {
  // §6.2 on every rank: each rank's predicted attention time within the compute quota, and the
  // ranks as equal as the queue allows (see PackRanks).
  kPacked,
  // The baseline: the engine packed as one (PackBatch with ranks x compute_quota), the k-th chunk
  // of the plan on rank k % ranks, whatever its size.
  kRoundRobin,
};

// Plans the next forward batch of an engine with `ranks` data-parallel attention ranks (each
// rank computes the attention of the requests placed on it; the rest of the layer is shared, so
// the layer waits for the slowest rank). A request gets at most one entry (its chunks depend on
// each other within a layer). Entries are in queue order; out->rank_ns and predicted_ns as
// documented on BatchPlan.
//
// kPacked: the per-rank level L is the largest L <= compute_quota - fixed_ns with
// ranks * L <= Σ_i min(t_i, L) (t_i: the predicted time of all of request i; one request
// contributes at most one rank's worth): when the queue holds more than the ranks can take, every
// rank fills to the quota (§6.2); when it holds less, the work is split evenly. Requests are
// taken in FIFO order, each onto the least-loaded rank, whole if it fits under L there and
// otherwise as the largest chunk that does (binary search, >= min_chunk_tokens); the batch closes
// at the first request for which not even that is left. Since chunk remainders wait for the next
// batch, the ranks may end below L: the plan is redone at the level the ranks actually reached
// (a few rounds), keeping the one with the lowest predicted max/avg. Progress and HBM rules as in
// PackBatch (max_batch_kv_tokens bounds the whole batch).
// kRoundRobin: PackBatch's plan for quota ranks x compute_quota, entries placed in turn.
// Errors as PackBatch; kSchedBadConfig for ranks == 0.
Status PackRanks(std::span<const PrefillWork> queue, const AttentionTimeModel& model,
                 const BatchLimits& limits, uint32_t ranks, RankPlacement placement,
                 BatchPlan* out);

}  // namespace dualpath::sched
