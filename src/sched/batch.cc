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
                {"per_token_sq_ns", per_token_sq_ns},
                {"per_chunk_ns", per_chunk_ns},
                {"per_cached_pair_ctx_ns", per_cached_pair_ctx_ns}};
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

namespace {

// Fills out->rank_ns and predicted_ns from the entries' ranks.
void RankTimes(std::span<const PrefillWork> queue, const AttentionTimeModel& model, uint32_t ranks,
               BatchPlan* out) {
  out->rank_ns.assign(ranks, 0.0);
  for (const BatchEntry& e : out->entries) {
    double& t = out->rank_ns[e.rank];
    if (t == 0) t = model.fixed_ns;
    t += model.ItemNs(queue[e.index].cached_tokens, e.bsz);
  }
  out->predicted_ns = 0;
  for (double t : out->rank_ns) out->predicted_ns = std::max(out->predicted_ns, t);
}

// max / mean of the ranks' predicted times (1 when all are idle).
double MaxOverAvg(const std::vector<double>& t) {
  double sum = 0, mx = 0;
  for (double v : t) {
    sum += v;
    mx = std::max(mx, v);
  }
  return sum > 0 ? mx * static_cast<double>(t.size()) / sum : 1.0;
}

// kPacked's placement at level `level` (ns per rank, without fixed_ns); see PackRanks.
void PlaceAtLevel(std::span<const PrefillWork> queue, const AttentionTimeModel& model,
                  const BatchLimits& limits, uint32_t ranks, double level, BatchPlan* out) {
  out->Clear();
  std::vector<double> load(ranks, 0.0);
  const int64_t kv_limit = limits.max_batch_kv_tokens;
  int64_t kv = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    const int64_t c = queue[i].cached_tokens;
    const int64_t b = queue[i].remaining_tokens;
    const uint32_t r =
        static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    const bool fits_kv = kv_limit == 0 || kv + c + b <= kv_limit;
    if (fits_kv && load[r] + model.ItemNs(c, b) <= level) {
      out->entries.push_back(BatchEntry{static_cast<uint32_t>(i), b, false, r});
      load[r] += model.ItemNs(c, b);
      kv += c + b;
      out->tokens += b;
      continue;
    }
    // The largest chunk that keeps rank r within the level (time is monotone in the chunk).
    int64_t hi = b - 1;
    if (kv_limit != 0) hi = std::min(hi, kv_limit - kv - c);
    int64_t lo = 0;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (load[r] + model.ItemNs(c, mid) <= level) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    int64_t take = std::max<int64_t>(lo, 0);
    if (take < limits.min_chunk_tokens) {
      // r is the least-loaded rank: no rank has room for a worthwhile chunk of this request, and
      // later requests do not overtake it (FIFO). The head always progresses (PackBatch's rule).
      if (!out->entries.empty()) break;
      take = std::min(b, limits.min_chunk_tokens);
      if (kv_limit != 0) take = std::min(take, kv_limit - c);
    }
    out->entries.push_back(BatchEntry{static_cast<uint32_t>(i), take, take < b, r});
    load[r] += model.ItemNs(c, take);
    kv += c + take;
    out->tokens += take;
  }
  RankTimes(queue, model, ranks, out);
  out->level_ns = level;
}

}  // namespace

Status PackRanks(std::span<const PrefillWork> queue, const AttentionTimeModel& model,
                 const BatchLimits& limits, uint32_t ranks, RankPlacement placement,
                 BatchPlan* out) {
  out->Clear();
  if (ranks == 0) return BadConfig("PackRanks: ranks must be >= 1");
  if (placement == RankPlacement::kRoundRobin) {
    BatchLimits engine = limits;
    engine.compute_quota = limits.compute_quota * static_cast<Nanos>(ranks);
    RETURN_IF_ERROR(PackBatch(queue, model, engine, out));
    for (size_t k = 0; k < out->entries.size(); ++k) {
      out->entries[k].rank = static_cast<uint32_t>(k % ranks);
    }
    RankTimes(queue, model, ranks, out);
    return Status::Ok();
  }
  // The checks (model, limits, queue entries, a head that can never fit) are PackBatch's: one
  // definition of each rule. Its plan for one rank is not used further.
  RETURN_IF_ERROR(PackBatch(queue, model, limits, out));
  out->Clear();
  if (queue.empty()) return Status::Ok();

  // The water level: the largest L <= quota' with ranks * L <= Σ min(t_i, L). f(L) = Σ min(t_i,
  // L) - ranks * L is concave with f(0) = 0, rising at first iff there are more requests than
  // ranks, so L is quota' when f(quota') >= 0 and otherwise f's positive root (bisection).
  const double quota = static_cast<double>(limits.compute_quota) - model.fixed_ns;
  std::vector<double> t(queue.size());
  for (size_t i = 0; i < queue.size(); ++i) {
    t[i] = model.ItemNs(queue[i].cached_tokens, queue[i].remaining_tokens);
  }
  auto f = [&](double level) {
    double sum = 0;
    for (double v : t) sum += std::min(v, level);
    return sum - static_cast<double>(ranks) * level;
  };
  double level = quota;
  if (queue.size() > ranks && f(quota) < 0) {
    double lo = 0, hi = quota;  // f(lo) >= 0 > f(hi)
    for (int it = 0; it < 64; ++it) {
      const double mid = (lo + hi) / 2;
      (f(mid) >= 0 ? lo : hi) = mid;
    }
    level = lo;
  }
  // Chunk remainders wait for the next batch, so the ranks may end below the level: redo the plan
  // at the mean level the ranks reached while that balances better (a few rounds; each round
  // lowers the level, so batches get smaller only while balance improves).
  PlaceAtLevel(queue, model, limits, ranks, level, out);
  if (queue.size() <= ranks) return Status::Ok();  // a rank each: some idle whatever is done
  double best = MaxOverAvg(out->rank_ns);
  BatchPlan trial;
  for (int round = 0; round < 4 && best > 1.0 + 1e-9; ++round) {
    double sum = 0;
    for (double v : out->rank_ns) sum += v > 0 ? v - model.fixed_ns : 0;
    const double next = sum / static_cast<double>(ranks);
    if (!(next < level) || next <= 0) break;
    level = next;
    PlaceAtLevel(queue, model, limits, ranks, level, &trial);
    const double ratio = MaxOverAvg(trial.rank_ns);
    if (ratio >= best) break;
    best = ratio;
    std::swap(*out, trial);
  }
  return Status::Ok();
}

}  // namespace dualpath::sched
