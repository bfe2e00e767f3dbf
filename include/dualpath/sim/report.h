// Output of `dualpath sim`: the human table, the --json document and the --plot PNGs.
//
// The JSON document is {"config": {...}, "results": [{"system", "jct_s", "ttft_p50_s",
// "ttft_p99_s", "ttst_s", "tpot_s", "snic_max_over_avg", "attn_max_over_avg", "max_aps", ...}],
// "wall_s", "sim_requests_per_s"}; fields a mode does not produce are null
// (docs/formats/sim_json.md). Plots are drawn by Debian's gnuplot (pngcairo terminal).
//
// Thread safety: pure functions of their arguments (plots write files under the given dir).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/sim/simulator.h"

namespace dualpath::sim {

struct ReportEntry {
  SimResult result;
  bool online = false;
  std::optional<double> max_aps;  // --find-max-aps
};

struct Report {
  std::string config_json;  // a JSON object
  std::vector<ReportEntry> entries;
  double wall_s = 0;
  double sim_requests_per_s = 0;
};

std::string ReportJson(const Report& report);
// Fixed-width table; speedups relative to the "basic" entry when present.
std::string ReportTable(const Report& report);
// Writes jct.png (offline) and snic_<system>.png per entry into dir (created if missing).
Status WritePlots(const Report& report, const std::string& dir);

}  // namespace dualpath::sim
