// Online capacity (DualPath §7.4): the highest Poisson agent arrival rate at which a system still
// meets the SLO (SimConfig::slo: mean TTFT and mean TPOT over the steady window), as
// `dualpath sim --find-max-aps` reports it.
//
// The search doubles the rate from 0.05 agents/s until a run misses the SLO (at most 12 times),
// then bisects to 3 % precision. Every tried rate runs agents arriving over the same horizon
// (SimConfig::online_horizon_s; sessions reused cyclically, at most kMaxSimAgents), so an
// overloaded rate shows as a queue that keeps growing within the steady window.
//
// Thread safety: pure functions of their arguments (each run is a separate Simulate call).
#pragma once

#include <functional>

#include "dualpath/common/status.h"
#include "dualpath/sim/config.h"
#include "dualpath/sim/simulator.h"

namespace dualpath::sim {

// Whether an online run meets the SLO: ttft_mean_s <= slo.ttft_mean_s and tpot_mean_s <=
// slo.tpot_mean_s.
bool MeetsSlo(const SimResult& result, const SloConfig& slo);

struct MaxAps {
  double aps = 0;  // highest rate found meeting the SLO (0: not even the first, 0.05 agents/s)
  SimResult at;    // the run at that rate (or, for 0, the failing run at 0.05 agents/s)
};

// Runs one spec (Simulate, or a caller's wrapper that times it).
using SimulateFn = std::function<Result<SimResult>(const RunSpec&)>;

// The search above for `spec` (its system, shape and seed; online and the rate are set here).
Result<MaxAps> FindMaxAps(const SimConfig& config, RunSpec spec, const SimulateFn& simulate);

}  // namespace dualpath::sim
