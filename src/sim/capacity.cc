#include "dualpath/sim/capacity.h"

#include <algorithm>
#include <optional>

namespace dualpath::sim {

bool MeetsSlo(const SimResult& r, const SloConfig& slo) {
  return r.ttft_mean_s <= slo.ttft_mean_s && r.tpot_mean_s <= slo.tpot_mean_s;
}

Result<MaxAps> FindMaxAps(const SimConfig& config, RunSpec spec, const SimulateFn& simulate) {
  spec.online = true;
  auto at = [&](double aps) {
    spec.aps = aps;
    // Bounded like --agents: at most kMaxSimAgents whatever the rate the search reaches.
    spec.online_agents = std::clamp<uint64_t>(static_cast<uint64_t>(aps * config.online_horizon_s),
                                              64, kMaxSimAgents);
    return simulate(spec);
  };
  double lo = 0, hi = 0.05;
  std::optional<SimResult> best;
  for (int i = 0; i < 12; ++i) {
    ASSIGN_OR_RETURN(SimResult r, at(hi));
    if (!MeetsSlo(r, config.slo)) break;
    lo = hi;
    best = r;
    hi *= 2;
  }
  if (!best) {
    ASSIGN_OR_RETURN(SimResult r, at(hi));
    return MaxAps{0.0, std::move(r)};
  }
  while (hi - lo > 0.03 * lo) {
    const double mid = (lo + hi) / 2;
    ASSIGN_OR_RETURN(SimResult r, at(mid));
    if (MeetsSlo(r, config.slo)) {
      lo = mid;
      best = r;
    } else {
      hi = mid;
    }
  }
  return MaxAps{lo, *best};
}

}  // namespace dualpath::sim
