// The generative model behind GenerateSynthetic (private to the trace component; the fit tool
// trace_fit_synthetic uses it to fit the parameters to DualPath Table 2).
//
// One trajectory (all counts in tokens):
//  - the first turn appends the task prompt (system prompt, repository description, bug report):
//    lognormal(first_median, 0.3). It is why Table 2's mean prompt ("Context") exceeds half the
//    final context ("Total"): every later prompt carries it;
//  - the task's length in turns T ~ lognormal(turns_median, turns_sigma): how long the agent works
//    on its task, its own driver (the real sessions' turn counts vary far more than their turn
//    sizes). The trajectory ends after T turns, or before the turn that would exceed MaxLen (the
//    paper truncates at MaxLen);
//  - per-turn appends are lognormal(append_median * (T / turns_median)^append_turns_slope *
//    e^(append_traj_sigma z_a), append_turn_sigma) and generations lognormal(gen_median *
//    (T / turns_median)^gen_turns_slope * e^(gen_traj_sigma z_g), gen_turn_sigma), with z_a, z_g
//    standard normal per trajectory, correlated append_gen_rho (an agent reading big tool outputs
//    also writes somewhat longer replies). The append slope, turns_sigma, the between- and
//    within-trajectory sigmas and rho are measured on the real Claude Code sessions (docs/trace.md,
//    "The shape against real sessions"); the four medians are fitted to Table 2's means and the
//    generation slope to the real sessions' coupling of generation to length. Generation
//    per turn does not depend on the turn's position (the real sessions' median generation is flat
//    over position).
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>

#include "dualpath/trace/workload.h"

namespace dualpath::trace::internal {

struct ModelParams {
  uint32_t max_len_k = 64;
  // Fitted to DualPath Table 2 (trace_fit_synthetic).
  double first_median = 4000;
  double turns_median = 100;
  double append_median = 200;
  double gen_median = 120;
  // d log(median generation) / d log(task turns): fitted so that the generated trajectories' rank
  // correlation of median generation / median append with turns matches the real sessions'
  // (+0.141); measured directly on the real sessions it is -0.184, but there no MaxLen truncation
  // selects the small-append sessions as the long ones.
  double gen_turns_slope = -0.184;
  // Measured on the WEKA Claude Code sessions (scripts/trace/shape_compare.py; docs/trace.md).
  double turns_sigma = 0.945;          // sd of log(turns per session)
  double append_turns_slope = -0.384;  // d log(session median append) / d log(turns)
  double append_traj_sigma = 0.913;    // sd of log(session median append) beside the slope
  double gen_traj_sigma = 0.396;       // sd of log(session median generation) beside the slope
  double append_gen_rho = 0.323;       // correlation of those two residuals
  double gen_turn_sigma = 0.822;       // sd of log(generation) within a session
  double append_turn_sigma = 1.575;    // sd of log(append) within a session
};

// The fitted rows for 32K, 48K and 64K; between rows, parameters are interpolated linearly;
// above 64K the 64K row is used with the requested MaxLen; below 32K the 32K row with the first
// (task) prompt scaled by MaxLen / 32K.
ModelParams ParamsFor(uint32_t max_len_k);

// Trajectories from explicit parameters (spec.max_len_k sets MaxLen; params.max_len_k is
// ignored). Same validation as GenerateSynthetic.
Result<Workload> GenerateWithParams(const SyntheticSpec& spec, const ModelParams& params);

}  // namespace dualpath::trace::internal
