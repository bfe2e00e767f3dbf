// `dualpath sim`: the cluster simulator (src/sim) on the paper's workloads.
//
//   dualpath sim [--model ds660b] [--pd 2P4D] [--agents 1024] [--max-len 64K]
//                [--system basic|layerwise|dualpath-rr|dualpath|oracle|dualpath-split|all|a,b]
//                [--ablation] [--online --aps X | --find-max-aps] [--trace FILE]
//                [--json OUT] [--plot DIR] [--seed S] [--config FILE]
//                [--replay-workload synthetic|compute|codex|weka|mooncake|FILE --turns N
//                 --append N --gen N --max-context N]
//
// --model ref[:SPEC] is the reference CPU model the testbed's engines run (`model calibrate`
// writes the --config that gives its measured costs); --replay-workload is exactly the workload
// `dualpath cluster run --workload` replays with the same flags (docs/sim.md "Against the
// engines").
//
// With no arguments it runs Basic, DualPath and Oracle offline on the 64K synthetic workload and
// prints the comparison. Bad input: one line on stderr, exit status 2.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "dualpath/common/file.h"
#include "dualpath/common/numeric.h"
#include "dualpath/kv/model.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/replay/workload.h"
#include "dualpath/sched/routing.h"
#include "dualpath/sched/system.h"
#include "dualpath/sim/capacity.h"
#include "dualpath/sim/config.h"
#include "dualpath/sim/report.h"
#include "dualpath/sim/simulator.h"
#include "dualpath/trace/workload.h"

namespace dualpath::cli {
namespace {

using sim::SystemKind;

// Input ranges of the flags (docs/sim.md "Input ranges").
constexpr uint64_t kMaxAgents = sim::kMaxSimAgents;  // agent records are ~100 B each: ~1 GB
constexpr double kMinAps = 1e-3;  // agents/s: 1,024 agents then arrive over ~12 days
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
  std::string routing = "dualpath";
  std::string config;
  double start_skew_s = 0;  // --start-skew: overrides offline_start_skew_s when given
  bool start_skew_given = false;
  // --replay-workload: cluster run's workload (its defaults, WithSourceDefaults, its ranges).
  replay::WorkloadOptions replay{.source = ""};  // "": not given
  replay::GivenOptions replay_given;
  bool replay_shape_given = false;  // any of --turns/--append/--gen/--max-context
};

// A model preset or JSON (kv::ResolveModel), or "ref" / "ref:SPEC": the reference CPU model of
// the engines (RefModelConfig::Parse's spec), so the simulator sees their geometry.
Result<kv::ModelGeometry> ResolveSimModel(const std::string& name) {
  if (name == "ref" || name.rfind("ref:", 0) == 0) {
    ASSIGN_OR_RETURN(const model::RefModelConfig c,
                     model::RefModelConfig::Parse(name == "ref" ? "" : name.substr(4)));
    return c.Geometry();
  }
  return kv::ResolveModel(name);
}

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
    return std::vector<SystemKind>(std::begin(sched::kAblationSystems),
                                   std::end(sched::kAblationSystems));
  }
  return sched::ParseSystemList(o.system);
}

// The mode flags: --online with --aps in range, or --find-max-aps, or neither (offline).
Status CheckModeFlags(const Options& o) {
  if (o.online && o.find_max_aps) {
    return InvalidArgument("--online --aps and --find-max-aps are exclusive");
  }
  if (o.online && !(o.aps > 0)) {
    return InvalidArgument("--online needs --aps X with X > 0");
  }
  if (o.online) {
    // Arrivals are spread over agents / aps seconds: a rate near 0 makes simulated time, not the
    // workload, the size of the run (docs/sim.md "Input ranges").
    RETURN_IF_ERROR(CheckRange("--aps", o.aps, kMinAps, kMaxAps, "agents/s"));
  }
  if (!o.online && o.aps != 0) {
    return InvalidArgument("--aps needs --online");
  }
  return Status::Ok();
}

// Everything the flags name, parsed and checked (in the order errors are reported).
struct Inputs {
  sim::SimConfig config;  // resolved for the model and the cluster shape
  kv::ModelGeometry model;
  sim::ClusterShape shape;
  uint64_t agents = 0;
  uint32_t max_len_k = 0;
  std::vector<SystemKind> systems;
  sched::Routing routing = sched::Routing::kDualPath;
};

Result<Inputs> ResolveInputs(const Options& o) {
  RETURN_IF_ERROR(CheckModeFlags(o));
  Inputs in;
  if (!o.config.empty()) {
    ASSIGN_OR_RETURN(in.config, sim::LoadSimConfig(o.config));
  }
  if (o.start_skew_given) {
    RETURN_IF_ERROR(CheckRange("--start-skew", o.start_skew_s, 0, 1e6, "s"));
    if (o.online || o.find_max_aps) {
      return InvalidArgument("--start-skew is for offline runs (online arrivals are Poisson)");
    }
    in.config.offline_start_skew_s = o.start_skew_s;
  }
  ASSIGN_OR_RETURN(in.model, ResolveSimModel(o.model));
  ASSIGN_OR_RETURN(in.shape, sim::ParseClusterShape(o.pd));
  // Model-derived engine constants, resolved here so --json records the values used.
  ASSIGN_OR_RETURN(in.config, sim::ResolveEngine(in.config, in.model, in.shape.prefill_nodes,
                                                 in.shape.decode_nodes));
  ASSIGN_OR_RETURN(in.agents, ParseCount("--agents", o.agents));
  RETURN_IF_ERROR(CheckCountRange("--agents", in.agents, 1, kMaxAgents, "agents"));
  ASSIGN_OR_RETURN(in.max_len_k, ParseMaxLen(o.max_len));
  ASSIGN_OR_RETURN(in.systems, Systems(o));
  ASSIGN_OR_RETURN(in.routing, sched::ParseRouting(o.routing));
  return in;
}

// The workload in the simulator's compact form, and its name. Synthetic workloads are a set of
// trajectories that the agents sample (Appendix A.3, sim::SampleAgents).
Result<sim::SimWorkload> BuildWorkload(const Options& o, const Inputs& in, std::string* name) {
  const sim::SimConfig& config = in.config;
  const bool replayed = !o.replay.source.empty();
  if (!replayed && o.replay_shape_given) {
    return InvalidArgument("--turns, --append, --gen and --max-context need --replay-workload");
  }
  Result<trace::Workload> workload = [&]() -> Result<trace::Workload> {
    if (replayed) {
      if (!o.trace.empty()) return InvalidArgument("--replay-workload and --trace are exclusive");
      replay::WorkloadOptions w = replay::WithSourceDefaults(o.replay, o.replay_given);
      w.agents = static_cast<uint32_t>(in.agents);
      w.seed = o.seed;
      return replay::ShapeWorkload(w);
    }
    if (!o.trace.empty()) return LoadTrace(o.trace);
    trace::SyntheticSpec spec;
    spec.max_len_k = in.max_len_k;
    spec.sessions = config.synthetic_trajectories > 0 ? config.synthetic_trajectories
                                                      : static_cast<uint32_t>(in.agents);
    spec.seed = o.seed;
    spec.block_size = config.engine.block_tokens;
    return trace::GenerateSynthetic(spec);
  }();
  if (!workload.ok()) return workload.status();
  ASSIGN_OR_RETURN(sim::SimWorkload compact,
                   sim::CompactWorkload(*workload, config.engine.block_tokens));
  if (o.trace.empty() && !replayed && config.synthetic_trajectories > 0) {
    compact = sim::SampleAgents(compact, in.agents, o.seed);
  }
  *name = workload->name;
  return compact;
}

sim::RunInfo MakeRunInfo(const Options& o, const Inputs& in, const sim::SimWorkload& workload,
                         std::string workload_name) {
  sim::RunInfo run;
  run.model = in.model.name;
  run.shape = in.shape;
  run.agents = workload.agents.size();
  for (const sim::SimAgent& a : workload.agents) run.requests += a.num_turns;
  run.workload = std::move(workload_name);
  if (o.trace.empty() && o.replay.source.empty() && in.config.synthetic_trajectories > 0) {
    run.trajectories = in.config.synthetic_trajectories;
  }
  run.max_len_k = in.max_len_k;
  run.mode = o.find_max_aps ? sim::RunMode::kFindMaxAps
                            : (o.online ? sim::RunMode::kOnline : sim::RunMode::kOffline);
  if (o.online) run.aps = o.aps;
  run.ablation = o.ablation;
  run.seed = o.seed;
  run.routing = std::string(sched::RoutingName(in.routing));
  if (!o.trace.empty()) run.trace = o.trace;
  run.sim = in.config;
  return run;
}

// Simulates each run, timing the simulations alone (sim_requests_per_s).
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

  // One system as the flags ask: offline, online at --aps, or the highest rate meeting the SLO.
  Result<sim::ReportEntry> RunSystem(const Options& o, const Inputs& in, SystemKind system) {
    sim::RunSpec spec;
    spec.system = system;
    spec.shape = in.shape;
    spec.routing = in.routing;
    spec.seed = o.seed;
    sim::ReportEntry entry;
    if (o.find_max_aps) {
      ASSIGN_OR_RETURN(
          sim::MaxAps best,
          sim::FindMaxAps(config, spec, [this](const sim::RunSpec& s) { return Run(s); }));
      entry.max_aps = best.aps;
      entry.result = std::move(best.at);
      entry.online = true;
    } else {
      spec.online = o.online;
      spec.aps = o.aps;
      ASSIGN_OR_RETURN(entry.result, Run(spec));
      entry.online = o.online;
    }
    return entry;
  }
};

Status WriteOutputs(const Options& o, const sim::Report& report) {
  const sim::RunInfo& run = report.run;
  std::cout << run.model << " " << sim::ClusterShapeName(run.shape) << ", " << run.agents
            << " agents (" << run.requests << " requests, " << run.workload << "), "
            << sim::RunModeName(run.mode)
            << (o.online ? " at " + std::to_string(o.aps) + " agents/s" : "") << "\n";
  std::cout << sim::ReportTable(report);
  if (!o.json_out.empty()) {
    RETURN_IF_ERROR(WriteOutputFile(o.json_out, sim::ReportJson(report), "--json"));
  }
  if (!o.plot_dir.empty()) {
    RETURN_IF_ERROR(sim::WritePlots(report, o.plot_dir));
  }
  return Status::Ok();
}

Status Sim(const Options& o) {
  const auto wall0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const Inputs in, ResolveInputs(o));
  std::string workload_name;
  ASSIGN_OR_RETURN(const sim::SimWorkload workload, BuildWorkload(o, in, &workload_name));
  sim::Report report;
  report.run = MakeRunInfo(o, in, workload, std::move(workload_name));
  Runner runner{in.config, in.model, workload};
  for (SystemKind k : in.systems) {
    ASSIGN_OR_RETURN(sim::ReportEntry entry, runner.RunSystem(o, in, k));
    report.entries.push_back(std::move(entry));
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  report.sim_requests_per_s =
      runner.sim_wall_s > 0 ? static_cast<double>(runner.sim_requests) / runner.sim_wall_s : 0;
  return WriteOutputs(o, report);
}

int RunSim(const Options& o) {
  Status st = Sim(o);
  if (!st.ok()) return ReportError("sim", st);
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
                  "basic|layerwise|dualpath-rr|dualpath|oracle|dualpath-split|all, or a "
                  "comma-separated list (default all = basic,dualpath,oracle)");
  sub->add_flag("--ablation", opts->ablation,
                "Basic, +layerwise, +dual-path (round-robin side), +scheduler");
  sub->add_flag("--online", opts->online, "Poisson agent arrivals at --aps");
  sub->add_option("--aps", opts->aps, "Online agent arrival rate (agents/s)");
  sub->add_flag("--find-max-aps", opts->find_max_aps,
                "Highest arrival rate meeting the SLO (config slo: mean TTFT <= 4 s and TPOT <= "
                "50 ms by default)");
  sub->add_option("--trace", opts->trace,
                  "Trace instead of the synthetic workload (.jsonl Mooncake, WEKA .json or dir)");
  sub->add_option("--json", opts->json_out, "Write results as JSON to this file");
  sub->add_option("--plot", opts->plot_dir, "Write PNG plots (gnuplot) into this directory");
  sub->add_option("--seed", opts->seed, "Workload and arrival seed (default 1)");
  sub->add_option("--routing", opts->routing,
                  "Prefill engine per turn: dualpath (the system's choice, default), round-robin "
                  "((agent + turn) mod PEs) or sticky (agent mod PEs)");
  sub->add_option("--config", opts->config, "Simulator config JSON overriding the defaults");
  sub->add_option("--replay-workload", opts->replay.source,
                  "The workload `cluster run --workload` replays (synthetic, compute, codex, weka, "
                  "mooncake or a trace file), shaped by --turns/--append/--gen/--max-context and "
                  "--agents/--seed exactly as there");
  CLI::Option* turns = sub->add_option("--turns", opts->replay.turns,
                                       "--replay-workload: turns per agent at most (default 6)");
  CLI::Option* append = sub->add_option("--append", opts->replay.append,
                                        "--replay-workload: mean append tokens (default 24)");
  CLI::Option* gen = sub->add_option(
      "--gen", opts->replay.gen, "--replay-workload: mean generated tokens per turn (default 16)");
  CLI::Option* max_context =
      sub->add_option("--max-context", opts->replay.max_context,
                      "--replay-workload: no prompt + generation exceeds this (default 3072)");
  CLI::Option* skew = sub->add_option(
      "--start-skew", opts->start_skew_s,
      "Offline: agents' first turns start uniformly over [0, S] seconds (default 0)");
  sub->callback([opts, exit_code, skew, turns, append, gen, max_context] {
    opts->start_skew_given = skew->count() > 0;
    opts->replay_given = {.append = append->count() > 0, .turns = turns->count() > 0};
    opts->replay_shape_given =
        turns->count() + append->count() + gen->count() + max_context->count() > 0;
    *exit_code = RunSim(*opts);
  });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
