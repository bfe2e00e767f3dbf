// Output of `dualpath sim`: the human table, the --json document and the --plot PNGs.
//
// The JSON document is {"config": {...}, "results": [{"system", "jct_s", "ttft_p50_s",
// "ttft_p99_s", "ttst_s", "tpot_s", "snic_max_over_avg", "attn_max_over_avg", "max_aps", ...}],
// "wall_s", "sim_requests_per_s"}; fields a mode does not produce are null
// (docs/formats/sim_json.md). Plots are drawn by Debian's gnuplot (pngcairo terminal).
//
// Thread safety: pure functions of their arguments (plots write files under the given dir).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/sim/config.h"
#include "dualpath/sim/simulator.h"

namespace dualpath::sim {

struct ReportEntry {
  SimResult result;
  bool online = false;
  std::optional<double> max_aps;  // --find-max-aps
};

enum class RunMode : uint8_t { kOffline, kOnline, kFindMaxAps };
std::string_view RunModeName(RunMode mode);  // "offline", "online", "find-max-aps"

// What was run: the --json "config" object (docs/formats/sim_json.md), one field per key.
struct RunInfo {
  std::string model;  // model name
  ClusterShape shape;
  uint64_t agents = 0;
  uint64_t requests = 0;                 // turns over all agents
  std::string workload;                  // workload name
  std::optional<uint32_t> trajectories;  // synthetic workloads sampled from a trajectory set
  uint32_t max_len_k = 0;
  RunMode mode = RunMode::kOffline;
  std::optional<double> aps;  // --online
  bool ablation = false;
  uint64_t seed = 0;
  std::string routing = "dualpath";  // --routing (RunSpec::routing)
  std::optional<std::string> trace;  // --trace
  SimConfig sim;                     // the effective (resolved) config
};

struct Report {
  RunInfo run;
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
