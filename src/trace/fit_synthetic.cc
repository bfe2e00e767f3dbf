// trace_fit_synthetic: fits the synthetic trajectory model (synthetic_model.h) to DualPath Table 2
// by a seeded random local search, and prints the kFitted rows for synthetic.cc.
//
// Each candidate is scored on 4 seeds x 500 trajectories (so the fit does not chase one seed's
// noise) by the worst relative error over Turns, Append, Gen, Total and Context, plus the
// per-session hit ratio (0.5 percentage points weigh like 10%). Usage:
//   build/dev/bin/trace_fit_synthetic [iterations per MaxLen, default 400]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "dualpath/trace/workload.h"
#include "trace/rng.h"
#include "trace/synthetic_model.h"

namespace dualpath::trace {
namespace {

struct Target {
  uint32_t max_len_k;
  double turns, append, gen, total, context, hit;
};
// DualPath Table 2 (means per trajectory, 500 trajectories each); hit rate ~98.7% is stated for
// 64K only, the other rows use 1 - Append/Context, which reproduces it at 64K.
constexpr Target kTable2[] = {
    {32, 60, 608, 148, 28639, 17183, 1 - 608.0 / 17183},
    {48, 106, 474, 172, 42607, 25120, 1 - 474.0 / 25120},
    {64, 157, 429, 176, 55958, 32721, 0.987},
};

double Score(const Target& t, const internal::ModelParams& p, bool print) {
  double worst = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto w =
        internal::GenerateWithParams({.max_len_k = t.max_len_k, .sessions = 500, .seed = seed}, p);
    if (!w.ok()) {
      return 1e9;
    }
    const WorkloadStats s = ComputeStats(*w, 64);
    const double errs[] = {s.turns_per_session / t.turns - 1,
                           s.append_mean / t.append - 1,
                           s.gen_mean / t.gen - 1,
                           s.total_mean / t.total - 1,
                           s.context_mean / t.context - 1,
                           (s.session_hit_ratio_mean - t.hit) * 20};
    for (double e : errs) {
      worst = std::max(worst, std::abs(e));
    }
    if (print) {
      std::printf("  seed %lu: turns %.1f append %.1f gen %.1f total %.0f context %.0f hit %.4f\n",
                  static_cast<unsigned long>(seed), s.turns_per_session, s.append_mean, s.gen_mean,
                  s.total_mean, s.context_mean, s.session_hit_ratio_mean);
    }
  }
  return worst;
}

}  // namespace
}  // namespace dualpath::trace

int main(int argc, char** argv) {
  using namespace dualpath::trace;
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 400;
  Rng rng(12345);
  for (const Target& t : kTable2) {
    internal::ModelParams best = internal::ParamsFor(t.max_len_k);
    best.max_len_k = t.max_len_k;
    double best_score = Score(t, best, false);
    for (int it = 0; it < iterations; ++it) {
      internal::ModelParams c = best;
      // Perturb one parameter: scales multiplicatively, fractions additively.
      double* fields[] = {&c.first_median, &c.append_median, &c.gen_median, &c.traj_sigma,
                          &c.turn_sigma,   &c.full_frac,     &c.budget_min};
      const size_t k = static_cast<size_t>(rng.Uniform() * 7);
      if (k < 5) {
        *fields[k] *= std::exp(0.15 * rng.Normal());
      } else {
        *fields[k] = std::clamp(*fields[k] + 0.08 * rng.Normal(), 0.0, 0.98);
      }
      c.traj_sigma = std::clamp(c.traj_sigma, 0.05, 2.0);
      c.turn_sigma = std::clamp(c.turn_sigma, 0.05, 2.0);
      const double score = Score(t, c, false);
      if (score < best_score) {
        best_score = score;
        best = c;
      }
    }
    std::printf("%uK: worst error %.3f\n", t.max_len_k, best_score);
    Score(t, best, true);
    std::printf("    {%u, %.1f, %.1f, %.1f, %.3f, %.3f, %.3f, %.3f},\n", best.max_len_k,
                best.first_median, best.append_median, best.gen_median, best.traj_sigma,
                best.turn_sigma, best.full_frac, best.budget_min);
  }
  return 0;
}
