// The generative model behind GenerateSynthetic (private to the trace component; the fit tool
// trace_fit_synthetic uses it to fit the parameters to DualPath Table 2).
//
// One trajectory (all counts in tokens):
//  - the first turn appends the task prompt (system prompt, repository description, bug report):
//    lognormal(first_median, 0.3). It is why Table 2's mean prompt ("Context") exceeds half the
//    final context ("Total"): every later prompt carries it;
//  - the trajectory draws a latent size z ~ N(0, 1) clamped to [-2, 2]: its later appends are
//    lognormal(append_median * e^(traj_sigma z), turn_sigma) and its generations
//    lognormal(gen_median * e^(traj_sigma z / 2), turn_sigma). Trajectories that read big tool
//    outputs keep doing so, which is why Table 2's per-turn means times Turns exceed Total: the
//    many-turn trajectories are the small-turn ones;
//  - a fraction full_frac of trajectories run until the next turn would exceed MaxLen (the paper
//    truncates at MaxLen); the others finish their task at a budget uniform in
//    [budget_min, 1) * MaxLen.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>

#include "dualpath/trace/workload.h"

namespace dualpath::trace::internal {

struct ModelParams {
  uint32_t max_len_k = 64;
  double first_median = 4000;
  double append_median = 200;
  double gen_median = 120;
  double traj_sigma = 0.7;
  double turn_sigma = 0.7;
  double full_frac = 0.7;
  double budget_min = 0.3;
};

// The fitted rows for 32K, 48K and 64K; between rows, parameters are interpolated linearly;
// above 64K the 64K row is used with the requested MaxLen; below 32K the 32K row with the first
// (task) prompt scaled by MaxLen / 32K.
ModelParams ParamsFor(uint32_t max_len_k);

// Trajectories from explicit parameters (spec.max_len_k sets MaxLen; params.max_len_k is
// ignored). Same validation as GenerateSynthetic.
Result<Workload> GenerateWithParams(const SyntheticSpec& spec, const ModelParams& params);

}  // namespace dualpath::trace::internal
