// `dualpath sim`: the cluster simulator (src/sim) on the paper's workloads.
//
//   dualpath sim [--model ds660b] [--pd 2P4D] [--agents 1024] [--max-len 64K]
//                [--system basic|layerwise|dualpath-rr|dualpath|oracle|dualpath-split|all]
//                [--ablation] [--online --aps X | --find-max-aps] [--trace FILE]
//                [--json OUT] [--plot DIR] [--seed S] [--config FILE]
//
// With no arguments it runs Basic, DualPath and Oracle offline on the 64K synthetic workload and
// prints the comparison. Bad input: one line on stderr, exit status 2.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "dualpath/common/file.h"
#include "dualpath/common/numeric.h"
#include "dualpath/kv/model.h"
#include "dualpath/sim/config.h"
#include "dualpath/sim/report.h"
#include "dualpath/sim/simulator.h"
#include "dualpath/trace/workload.h"

namespace dualpath::cli {
namespace {

using sim::SystemKind;

// Input ranges of the flags (docs/sim.md "Input ranges").
constexpr uint64_t kMaxAgents = 10'000'000;  // agent records are ~100 B each: ~1 GB at most
constexpr double kMinAps = 1e-3;             // agents/s: 1,024 agents then arrive over ~12 days
constexpr double kMaxAps = 1e4;

struct Options {
  std::string model = "ds660b";
  std::string pd = "2P4D";
  std::string agents = "1024";
  std::string max_len = "64K";
  std::string system = "all";
  bool ablation = false;
  bool online = false;
  double aps = 0;
  bool find_max_aps = false;
  std::string trace;
  std::string json_out;
  std::string plot_dir;
  uint64_t seed = 1;
  std::string config;
};

// "1024", "2K" (x1024).
Result<uint64_t> ParseCount(const std::string& what, const std::string& text) {
  std::string digits = text;
  uint64_t mult = 1;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) {
    mult = 1024;
    digits.pop_back();
  }
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument(what + " '" + text + "' is not a count (e.g. 1024 or 2K)");
  }
  const uint64_t v = std::stoull(digits) * mult;
  if (v == 0) {
    return InvalidArgument(what + " must be at least 1");
  }
  return v;
}

// "64K", "64k" or "64" -> 64 (thousands of tokens, K = 1024).
Result<uint32_t> ParseMaxLen(const std::string& text) {
  std::string digits = text;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) digits.pop_back();
  if (digits.empty() || digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("--max-len '" + text + "' is not a length like 64K");
  }
  return static_cast<uint32_t>(std::stoul(digits));
}

Result<trace::Workload> LoadTrace(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return trace::ReadWekaDir(path);
  if (path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl") {
    return trace::ReadMooncakeJsonl(path);
  }
  return trace::ReadWekaSession(path);
}

Result<std::vector<SystemKind>> Systems(const Options& o) {
  if (o.ablation) {
    return std::vector<SystemKind>{SystemKind::kBasic, SystemKind::kLayerwise,
                                   SystemKind::kDualPathRr, SystemKind::kDualPath};
  }
  if (o.system == "all") {
    return std::vector<SystemKind>{SystemKind::kBasic, SystemKind::kDualPath, SystemKind::kOracle};
  }
  ASSIGN_OR_RETURN(SystemKind k, sim::ParseSystem(o.system));
  return std::vector<SystemKind>{k};
}

struct Runner {
  const sim::SimConfig& config;
  const kv::ModelGeometry& model;
  const sim::SimWorkload& workload;
  double sim_wall_s = 0;
  uint64_t sim_requests = 0;

  Result<sim::SimResult> Run(const sim::RunSpec& spec) {
    const auto t0 = std::chrono::steady_clock::now();
    Result<sim::SimResult> r = sim::Simulate(config, model, workload, spec);
    sim_wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.ok()) sim_requests += r->requests;
    return r;
  }

  static bool MeetsSlo(const sim::SimResult& r) {
    return r.ttft_mean_s <= 4.0 && r.tpot_mean_s <= 0.050;  // §7.4 SLO
  }

  // Highest Poisson agent arrival rate meeting the SLO: doubling from 0.05 agents/s until it
  // fails, then bisection to 3% precision.
  Result<std::pair<double, sim::SimResult>> FindMaxAps(sim::RunSpec spec) {
    spec.online = true;
    // Each rate runs agents arriving over the same horizon (sessions reused cyclically), so an
    // overloaded rate shows as a queue that keeps growing within the steady window.
    auto at = [&](double aps) {
      spec.aps = aps;
      // Bounded like --agents: at most kMaxAgents whatever the rate the search reaches.
      spec.online_agents = std::clamp<uint64_t>(
          static_cast<uint64_t>(aps * config.online_horizon_s), 64, kMaxAgents);
      return Run(spec);
    };
    double lo = 0, hi = 0.05;
    std::optional<sim::SimResult> best;
    for (int i = 0; i < 12; ++i) {
      ASSIGN_OR_RETURN(sim::SimResult r, at(hi));
      if (!MeetsSlo(r)) break;
      lo = hi;
      best = r;
      hi *= 2;
    }
    if (!best) {
      ASSIGN_OR_RETURN(sim::SimResult r, at(hi));
      return std::make_pair(0.0, r);
    }
    while (hi - lo > 0.03 * lo) {
      const double mid = (lo + hi) / 2;
      ASSIGN_OR_RETURN(sim::SimResult r, at(mid));
      if (MeetsSlo(r)) {
        lo = mid;
        best = r;
      } else {
        hi = mid;
      }
    }
    return std::make_pair(lo, *best);
  }
};

int RunSim(const Options& o) {
  const auto wall0 = std::chrono::steady_clock::now();
  if (o.online && o.find_max_aps) {
    return ReportError("sim", InvalidArgument("--online --aps and --find-max-aps are exclusive"));
  }
  if (o.online && !(o.aps > 0)) {
    return ReportError("sim", InvalidArgument("--online needs --aps X with X > 0"));
  }
  if (o.online) {
    // Arrivals are spread over agents / aps seconds: a rate near 0 makes simulated time, not the
    // workload, the size of the run (docs/sim.md "Input ranges").
    Status st = CheckRange("--aps", o.aps, kMinAps, kMaxAps, "agents/s");
    if (!st.ok()) return ReportError("sim", st);
  }
  if (!o.online && o.aps != 0) {
    return ReportError("sim", InvalidArgument("--aps needs --online"));
  }
  sim::SimConfig config;
  if (!o.config.empty()) {
    Result<sim::SimConfig> c = sim::LoadSimConfig(o.config);
    if (!c.ok()) return ReportError("sim", c.status());
    config = *c;
  }
  Result<kv::ModelGeometry> model = kv::ResolveModel(o.model);
  if (!model.ok()) return ReportError("sim", model.status());
  Result<sim::ClusterShape> shape = sim::ParseClusterShape(o.pd);
  if (!shape.ok()) return ReportError("sim", shape.status());
  {
    // Model-derived engine constants, resolved here so --json records the values used.
    Result<sim::SimConfig> resolved =
        sim::ResolveEngine(config, *model, shape->prefill_nodes, shape->decode_nodes);
    if (!resolved.ok()) return ReportError("sim", resolved.status());
    config = *resolved;
  }
  Result<uint64_t> agents = ParseCount("--agents", o.agents);
  if (!agents.ok()) return ReportError("sim", agents.status());
  if (Status st = CheckCountRange("--agents", *agents, 1, kMaxAgents, "agents"); !st.ok()) {
    return ReportError("sim", st);
  }
  Result<uint32_t> max_len = ParseMaxLen(o.max_len);
  if (!max_len.ok()) return ReportError("sim", max_len.status());
  Result<std::vector<SystemKind>> systems = Systems(o);
  if (!systems.ok()) return ReportError("sim", systems.status());

  Result<trace::Workload> workload = [&]() -> Result<trace::Workload> {
    if (!o.trace.empty()) return LoadTrace(o.trace);
    trace::SyntheticSpec spec;
    spec.max_len_k = *max_len;
    // Appendix A.3: a dataset of trajectories that agents sample (see SampleAgents below).
    spec.sessions = config.synthetic_trajectories > 0 ? config.synthetic_trajectories
                                                      : static_cast<uint32_t>(*agents);
    spec.seed = o.seed;
    spec.block_size = config.engine.block_tokens;
    return trace::GenerateSynthetic(spec);
  }();
  if (!workload.ok()) return ReportError("sim", workload.status());
  Result<sim::SimWorkload> compact = sim::CompactWorkload(*workload, config.engine.block_tokens);
  if (!compact.ok()) return ReportError("sim", compact.status());
  if (o.trace.empty() && config.synthetic_trajectories > 0) {
    *compact = sim::SampleAgents(*compact, *agents, o.seed);
  }
  const std::string workload_name = workload->name;
  *workload = trace::Workload{};  // the compact form is all the simulator needs

  nlohmann::json cfg;
  cfg["model"] = model->name;
  cfg["pd"] =
      std::to_string(shape->prefill_nodes) + "P" + std::to_string(shape->decode_nodes) + "D";
  cfg["agents"] = compact->agents.size();
  uint64_t total_requests = 0;
  for (const sim::SimAgent& a : compact->agents) total_requests += a.num_turns;
  cfg["requests"] = total_requests;
  cfg["workload"] = workload_name;
  cfg["trajectories"] = o.trace.empty() && config.synthetic_trajectories > 0
                            ? nlohmann::json(config.synthetic_trajectories)
                            : nlohmann::json(nullptr);
  cfg["max_len_k"] = *max_len;
  cfg["mode"] = o.find_max_aps ? "find-max-aps" : (o.online ? "online" : "offline");
  cfg["aps"] = o.online ? nlohmann::json(o.aps) : nlohmann::json(nullptr);
  cfg["ablation"] = o.ablation;
  cfg["seed"] = o.seed;
  cfg["trace"] = o.trace.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.trace);
  cfg["sim"] = nlohmann::json::parse(sim::SimConfigToJson(config));

  Runner runner{config, *model, *compact};
  sim::Report report;
  report.config_json = cfg.dump();
  for (SystemKind k : *systems) {
    sim::RunSpec spec;
    spec.system = k;
    spec.shape = *shape;
    spec.seed = o.seed;
    sim::ReportEntry entry;
    if (o.find_max_aps) {
      auto r = runner.FindMaxAps(spec);
      if (!r.ok()) return ReportError("sim", r.status());
      entry.max_aps = r->first;
      entry.result = r->second;
      entry.online = true;
    } else {
      spec.online = o.online;
      spec.aps = o.aps;
      Result<sim::SimResult> r = runner.Run(spec);
      if (!r.ok()) return ReportError("sim", r.status());
      entry.result = std::move(*r);
      entry.online = o.online;
    }
    report.entries.push_back(std::move(entry));
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  report.sim_requests_per_s =
      runner.sim_wall_s > 0 ? static_cast<double>(runner.sim_requests) / runner.sim_wall_s : 0;

  std::cout << model->name << " " << cfg["pd"].get<std::string>() << ", " << compact->agents.size()
            << " agents (" << total_requests << " requests, " << workload_name << "), "
            << cfg["mode"].get<std::string>()
            << (o.online ? " at " + std::to_string(o.aps) + " agents/s" : "") << "\n";
  std::cout << sim::ReportTable(report);
  if (!o.json_out.empty()) {
    Status st = WriteOutputFile(o.json_out, sim::ReportJson(report), "--json");
    if (!st.ok()) return ReportError("sim", st);
  }
  if (!o.plot_dir.empty()) {
    Status st = sim::WritePlots(report, o.plot_dir);
    if (!st.ok()) return ReportError("sim", st);
  }
  return kExitOk;
}

void Register(CLI::App& root, int* exit_code) {
  auto opts = std::make_shared<Options>();
  CLI::App* sub = root.add_subcommand(
      "sim", "Simulate a PD-disaggregated cluster (Basic / DualPath / Oracle) on agentic traces");
  sub->add_option("--model", opts->model, "Model preset or model JSON (default ds660b)");
  sub->add_option("--pd", opts->pd, "Prefill/decode nodes, e.g. 2P4D (default)");
  sub->add_option("--agents", opts->agents, "Agents (sessions), e.g. 1024 or 2K (default 1024)");
  sub->add_option("--max-len", opts->max_len, "Synthetic workload MaxLen: 32K, 48K, 64K (default)");
  sub->add_option("--system", opts->system,
                  "basic|layerwise|dualpath-rr|dualpath|oracle|dualpath-split|all (default all)");
  sub->add_flag("--ablation", opts->ablation,
                "Basic, +layerwise, +dual-path (round-robin side), +scheduler");
  sub->add_flag("--online", opts->online, "Poisson agent arrivals at --aps");
  sub->add_option("--aps", opts->aps, "Online agent arrival rate (agents/s)");
  sub->add_flag("--find-max-aps", opts->find_max_aps,
                "Highest arrival rate with TTFT <= 4 s and TPOT <= 50 ms");
  sub->add_option("--trace", opts->trace,
                  "Trace instead of the synthetic workload (.jsonl Mooncake, WEKA .json or dir)");
  sub->add_option("--json", opts->json_out, "Write results as JSON to this file");
  sub->add_option("--plot", opts->plot_dir, "Write PNG plots (gnuplot) into this directory");
  sub->add_option("--seed", opts->seed, "Workload and arrival seed (default 1)");
  sub->add_option("--config", opts->config, "Simulator config JSON overriding the defaults");
  sub->callback([opts, exit_code] { *exit_code = RunSim(*opts); });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
