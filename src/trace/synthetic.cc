// Synthetic agent trajectories shaped like DualPath Table 2 (see docs/trace.md for the model and
// how its parameters were fitted).
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "dualpath/trace/workload.h"
#include "trace/rng.h"

namespace dualpath::trace {
namespace {

// The generative model of one trajectory (all token counts in tokens):
//  - the first turn appends the task prompt: lognormal(first_median, 0.3);
//  - the trajectory draws a latent size z ~ N(0, 1): its later appends are
//    lognormal(append_median * e^(traj_sigma z), turn_sigma) and its generations
//    lognormal(gen_median * e^(traj_sigma z / 2), turn_sigma). Trajectories that read big tool
//    outputs keep doing so, which is why Table 2's per-turn means times Turns exceed Total: the
//    many-turn trajectories are the small-turn ones;
//  - a fraction full_frac of trajectories run until the next turn would exceed MaxLen; the others
//    finish their task at a budget uniform in [budget_min, 1) * MaxLen.
struct ModelParams {
  uint32_t max_len_k;
  double first_median;
  double append_median;
  double gen_median;
  double traj_sigma;
  double turn_sigma;
  double full_frac;
  double budget_min;
};

// Fitted per Table 2 row (docs/trace.md, "Fitting").
constexpr std::array<ModelParams, 3> kFitted = {{
    {32, 3821.0, 210.7, 126.2, 0.667, 0.771, 0.772, 0.32},
    {48, 3821.0, 210.7, 126.2, 0.667, 0.771, 0.772, 0.32},
    {64, 3821.0, 210.7, 126.2, 0.667, 0.771, 0.772, 0.32},
}};

// Linear interpolation between fitted rows; outside [32K, 64K] the nearest row's shape is used
// (only MaxLen changes).
ModelParams ParamsFor(uint32_t max_len_k) {
  if (max_len_k <= kFitted.front().max_len_k) {
    return kFitted.front();
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

uint64_t Tokens(double x) { return std::max<uint64_t>(1, static_cast<uint64_t>(x)); }

Session GenerateOne(const ModelParams& p, uint64_t max_len, Rng& rng) {
  Session s;
  const double z = rng.Normal();
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

Result<Workload> GenerateSynthetic(const SyntheticSpec& spec) {
  if (spec.max_len_k < 8 || spec.max_len_k > 1024) {
    return InvalidArgument("synthetic max_len_k=" + std::to_string(spec.max_len_k) +
                           " outside [8, 1024] (K tokens)");
  }
  if (spec.sessions == 0) {
    return InvalidArgument("synthetic sessions must be positive");
  }
  if (spec.block_size == 0) {
    return InvalidArgument("synthetic block_size must be positive");
  }
  const ModelParams params = ParamsFor(spec.max_len_k);
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

}  // namespace dualpath::trace
