// Synthetic agent trajectories shaped like DualPath Table 2. The model is described in
// synthetic_model.h; docs/trace.md shows how the parameters were fitted and how close they land.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "dualpath/common/numeric.h"
#include "dualpath/trace/workload.h"
#include "trace/rng.h"
#include "trace/synthetic_model.h"

namespace dualpath::trace {
namespace internal {
namespace {

// Fitted by `trace_fit_synthetic` (src/trace/fit_synthetic.cc) against Table 2.
constexpr std::array<ModelParams, 3> kFitted = {{
    {32, 5281.8, 280.2, 107.8, 0.780, 0.710, 0.578, 0.601},
    {48, 6232.2, 228.6, 131.4, 0.815, 0.639, 0.758, 0.341},
    {64, 6352.8, 193.6, 123.9, 0.885, 0.741, 0.755, 0.310},
}};

uint64_t Tokens(double x) { return std::max<uint64_t>(1, static_cast<uint64_t>(x)); }

Session GenerateOne(const ModelParams& p, uint64_t max_len, Rng& rng) {
  Session s;
  // Truncated at +-2 sigma: the far tail (a trajectory of 1,000 ten-token turns) would make the
  // mean turn count of 500 trajectories swing with the seed.
  const double z = std::clamp(rng.Normal(), -2.0, 2.0);
  const double append_median = p.append_median * std::exp(p.traj_sigma * z);
  const double gen_median = p.gen_median * std::exp(0.5 * p.traj_sigma * z);
  const double budget = rng.Uniform() < p.full_frac
                            ? static_cast<double>(max_len)
                            : static_cast<double>(max_len) * rng.Uniform(p.budget_min, 1.0);
  uint64_t context = 0;
  while (true) {
    const bool first = s.turns.empty();
    const uint64_t append = Tokens(first ? rng.LogNormal(p.first_median, 0.3)
                                         : rng.LogNormal(append_median, p.turn_sigma));
    const uint64_t gen = Tokens(rng.LogNormal(gen_median, p.turn_sigma));
    if (static_cast<double>(context + append + gen) > budget) {
      if (first) {
        // Never an empty trajectory: one turn clipped to fit MaxLen.
        const uint64_t a = std::min(append, max_len - 1);
        s.turns.push_back(Turn{.append_tokens = a, .gen_tokens = std::min(gen, max_len - a)});
      }
      break;
    }
    s.turns.push_back(Turn{.append_tokens = append, .gen_tokens = gen});
    context += append + gen;
  }
  return s;
}

}  // namespace

ModelParams ParamsFor(uint32_t max_len_k) {
  if (max_len_k <= kFitted.front().max_len_k) {
    // Below 32K the task prompt shrinks with MaxLen, so short-context workloads still have turns.
    ModelParams p = kFitted.front();
    p.first_median *= static_cast<double>(max_len_k) / p.max_len_k;
    p.max_len_k = max_len_k;
    return p;
  }
  if (max_len_k >= kFitted.back().max_len_k) {
    return kFitted.back();
  }
  size_t hi = 1;
  while (kFitted[hi].max_len_k < max_len_k) {
    ++hi;
  }
  const ModelParams& a = kFitted[hi - 1];
  const ModelParams& b = kFitted[hi];
  const double f = static_cast<double>(max_len_k - a.max_len_k) / (b.max_len_k - a.max_len_k);
  auto lerp = [f](double x, double y) { return x + f * (y - x); };
  return ModelParams{max_len_k,
                     lerp(a.first_median, b.first_median),
                     lerp(a.append_median, b.append_median),
                     lerp(a.gen_median, b.gen_median),
                     lerp(a.traj_sigma, b.traj_sigma),
                     lerp(a.turn_sigma, b.turn_sigma),
                     lerp(a.full_frac, b.full_frac),
                     lerp(a.budget_min, b.budget_min)};
}

Result<Workload> GenerateWithParams(const SyntheticSpec& spec, const ModelParams& params) {
  if (spec.max_len_k < 8 || spec.max_len_k > 1024) {
    return InvalidArgument("synthetic max_len_k=" + std::to_string(spec.max_len_k) +
                           " outside [8, 1024] (K tokens)");
  }
  if (spec.sessions == 0) {
    return InvalidArgument("synthetic sessions must be positive");
  }
  // Memory grows with sessions x MaxLen (a 64K trajectory is ~170 turns, ~10 KB): bounded at
  // 100,000 trajectories of 64K, about 1 GB (docs/trace.md "Input ranges").
  RETURN_IF_ERROR(CheckCountRange("synthetic sessions x max_len_k",
                                  uint64_t{spec.sessions} * spec.max_len_k, 1,
                                  kMaxSyntheticSessionsTimesLenK, "K tokens of trajectories"));
  if (spec.block_size == 0) {
    return InvalidArgument("synthetic block_size must be positive");
  }
  const uint64_t max_len = uint64_t{spec.max_len_k} * 1024;
  Workload w;
  w.name = "synthetic-" + std::to_string(spec.max_len_k) + "K";
  w.sessions.reserve(spec.sessions);
  Rng rng(spec.seed);
  for (uint32_t i = 0; i < spec.sessions; ++i) {
    // One RNG stream per session, derived from the seed, so session i does not depend on how many
    // draws the sessions before it made (a prefix of N sessions is the same for any total).
    Rng session_rng(rng.Next());
    Session s = GenerateOne(params, max_len, session_rng);
    s.id = i;
    s.start_s = 0;  // offline rollout: every agent starts at t = 0 (DualPath §7)
    s.block_size = spec.block_size;
    w.sessions.push_back(std::move(s));
  }
  return w;
}

}  // namespace internal

Result<Workload> GenerateSynthetic(const SyntheticSpec& spec) {
  return internal::GenerateWithParams(spec, internal::ParamsFor(spec.max_len_k));
}

}  // namespace dualpath::trace
