#include "dualpath/sched/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dualpath/common/check.h"

namespace dualpath::sched {
namespace {

Status BadConfig(std::string message) { return Status(Code::kSchedBadConfig, std::move(message)); }

Status ValidateLimits(const BatchLimits& l) {
  if (l.compute_quota <= 0) {
    return BadConfig(fmt::format("compute_quota must be > 0 ns, got {}", l.compute_quota));
  }
  if (l.min_chunk_tokens <= 0) {
    return BadConfig(fmt::format("min_chunk_tokens must be > 0, got {}", l.min_chunk_tokens));
  }
  if (l.max_batch_kv_tokens < 0) {
    return BadConfig(fmt::format("max_batch_kv_tokens must be >= 0 (0 = no limit), got {}",
                                 l.max_batch_kv_tokens));
  }
  return Status::Ok();
}

}  // namespace

Status AttentionTimeModel::Validate() const {
  const struct {
    const char* name;
    double v;
  } fields[] = {{"fixed_ns", fixed_ns},
                {"per_token_ns", per_token_ns},
                {"per_cached_pair_ns", per_cached_pair_ns},
                {"per_token_sq_ns", per_token_sq_ns}};
  for (const auto& f : fields) {
    if (!std::isfinite(f.v) || f.v < 0) {
      return BadConfig(
          fmt::format("attention time model: {} must be finite and >= 0, got {}", f.name, f.v));
    }
  }
  return Status::Ok();
}

Status PackBatch(std::span<const PrefillWork> queue, const AttentionTimeModel& model,
                 const BatchLimits& limits, BatchPlan* out) {
  out->Clear();
  RETURN_IF_ERROR(model.Validate());
  RETURN_IF_ERROR(ValidateLimits(limits));
  const double quota = static_cast<double>(limits.compute_quota);
  const int64_t kv_limit = limits.max_batch_kv_tokens;
  double used = model.fixed_ns;
  int64_t kv = 0;

  for (size_t i = 0; i < queue.size(); ++i) {
    const PrefillWork& w = queue[i];
    if (w.cached_tokens < 0 || w.remaining_tokens <= 0) {
      return InvalidArgument(fmt::format(
          "PackBatch: queue[{}] has cached_tokens {} (want >= 0), remaining_tokens {} (want > 0)",
          i, w.cached_tokens, w.remaining_tokens));
    }
    const int64_t c = w.cached_tokens;
    const int64_t b = w.remaining_tokens;
    // A head whose whole prompt (cached + remaining) exceeds the KV limit can never finish: each
    // chunk would grow its cached KV until it fills the limit exactly, and then no token fits
    // (the old error then read "N cached tokens, more than max_batch_kv_tokens N allows"). Say so
    // before any chunk is spent on it; callers refuse such requests (sched::CheckTooLong). A
    // prompt that fits the limit alone always makes progress at the head (the rule below).
    if (i == 0 && kv_limit != 0 && b > kv_limit - c) {
      return ResourceExhausted(fmt::format(
          "PackBatch: queue[0] needs {} tokens of KV ({} cached + {} to compute), more than "
          "max_batch_kv_tokens {}: it can never run on this engine",
          c + b, c, b, kv_limit));
    }
    const bool fits_time = used + model.ItemNs(c, b) <= quota;
    const bool fits_kv = kv_limit == 0 || kv + c + b <= kv_limit;
    if (fits_time && fits_kv) {
      out->entries.push_back(BatchEntry{static_cast<uint32_t>(i), b, false});
      used += model.ItemNs(c, b);
      kv += c + b;
      out->tokens += b;
      continue;
    }
    // The largest chunk b' < b that keeps the batch within both limits. Time is monotone in b'
    // (non-negative coefficients), so binary search over [0, hi].
    int64_t hi = b - 1;
    if (kv_limit != 0) hi = std::min(hi, kv_limit - kv - c);
    int64_t lo = 0;  // invariant: lo fits (0 tokens always fits the time bound trivially)
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (used + model.ItemNs(c, mid) <= quota) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    int64_t take = std::max<int64_t>(lo, 0);
    if (take < limits.min_chunk_tokens) {
      if (!out->entries.empty()) break;  // a tiny tail chunk is not worth it; batch is closed
      // Progress: the head runs even if it alone exceeds the quota.
      take = std::min(b, limits.min_chunk_tokens);
      // The head fits the limit (checked above), so at least one token does.
      if (kv_limit != 0) take = std::min(take, kv_limit - c);
      DUALPATH_CHECK(take > 0, "PackBatch: the head cannot make progress");
    }
    out->entries.push_back(BatchEntry{static_cast<uint32_t>(i), take, take < b});
    used += model.ItemNs(c, take);
    out->tokens += take;
    break;
  }
  out->predicted_ns = out->entries.empty() ? 0 : used;
  return Status::Ok();
}

}  // namespace dualpath::sched
