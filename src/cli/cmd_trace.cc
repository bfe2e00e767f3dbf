// `dualpath trace stats FILE|DIR|--synthetic 64K`: workload statistics in the terms of DualPath
// Table 2 plus the ideal prefix-cache hit ratio.
#include <cctype>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "dualpath/common/file.h"
#include "dualpath/trace/workload.h"

namespace dualpath::cli {
namespace {

struct StatsOptions {
  std::string input;
  std::string synthetic;
  std::string format = "auto";
  uint32_t sessions = 500;
  uint64_t seed = 1;
  uint32_t block_size = 64;
  double scale_append = 1.0;
  double scale_gen = 1.0;
  bool infer_sessions = false;
  bool json = false;
  std::string turns_csv;  // --turns-csv: one line per turn, for the shape comparison
};

// "64K", "64k" or "64" → 64 (K tokens).
Result<uint32_t> ParseMaxLenK(const std::string& text) {
  std::string digits = text;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) {
    digits.pop_back();
  }
  if (digits.empty() || digits.size() > 7 ||
      !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return Status(Code::kInvalidArgument,
                  "--synthetic " + text + ": want a MaxLen such as 32K, 48K or 64K");
  }
  return static_cast<uint32_t>(std::stoul(digits));
}

Result<trace::Workload> LoadWorkload(const StatsOptions& o) {
  if (o.input.empty() == o.synthetic.empty()) {
    return Status(Code::kInvalidArgument, "give exactly one of FILE|DIR or --synthetic MAXLEN");
  }
  if (!o.synthetic.empty()) {
    ASSIGN_OR_RETURN(const uint32_t k, ParseMaxLenK(o.synthetic));
    ASSIGN_OR_RETURN(
        trace::Workload w,
        trace::GenerateSynthetic(
            {.max_len_k = k, .sessions = o.sessions, .seed = o.seed, .block_size = o.block_size}));
    if (o.scale_append == 1.0 && o.scale_gen == 1.0) {
      return w;
    }
    return trace::ScaleTurns(w, o.scale_append, o.scale_gen, uint64_t{k} * 1024);
  }
  if (o.scale_append != 1.0 || o.scale_gen != 1.0) {
    return Status(Code::kInvalidArgument, "--scale-append/--scale-gen need --synthetic");
  }
  ASSIGN_OR_RETURN(trace::Workload w, trace::ReadTrace(o.input, o.format));
  if (o.infer_sessions) {
    return trace::InferMooncakeSessions(w);
  }
  return w;
}

std::string Fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

void PrintHuman(const trace::Workload& w, const trace::WorkloadStats& s) {
  auto row = [](const std::string& name, const std::string& value) {
    std::cout << std::left << std::setw(24) << name << value << "\n";
  };
  row("workload", w.name);
  row("sessions", std::to_string(s.sessions));
  row("requests", std::to_string(s.turns));
  row("turns/session", Fixed(s.turns_per_session, 1) + "  (median " +
                           std::to_string(s.turns_median) + ", max " + std::to_string(s.turns_max) +
                           ")");
  row("append/turn",
      Fixed(s.append_mean, 1) + "  (pooled over requests: " + Fixed(s.append_per_request, 1) + ")");
  row("gen/turn",
      Fixed(s.gen_mean, 1) + "  (pooled over requests: " + Fixed(s.gen_per_request, 1) + ")");
  row("total/session", Fixed(s.total_mean, 0));
  row("context (mean prompt)", Fixed(s.context_mean, 0) + "  (pooled over requests: " +
                                   Fixed(s.prompt_per_request, 0) + ")");
  row("ideal hit ratio", Fixed(100.0 * s.ideal_hit_ratio, 2) + "% of prompt tokens, " +
                             Fixed(100.0 * s.ideal_block_hit_ratio, 2) + "% of blocks");
  row("hit ratio/session", Fixed(100.0 * s.session_hit_ratio_mean, 2) + "% (mean over sessions)");
}

void PrintJson(const trace::Workload& w, const trace::WorkloadStats& s) {
  nlohmann::ordered_json j;
  j["workload"] = w.name;
  j["sessions"] = s.sessions;
  j["requests"] = s.turns;
  j["turns_per_session"] = s.turns_per_session;
  j["turns_median"] = s.turns_median;
  j["turns_max"] = s.turns_max;
  j["append_mean"] = s.append_mean;
  j["gen_mean"] = s.gen_mean;
  j["total_mean"] = s.total_mean;
  j["context_mean"] = s.context_mean;
  j["append_per_request"] = s.append_per_request;
  j["gen_per_request"] = s.gen_per_request;
  j["prompt_per_request"] = s.prompt_per_request;
  j["prompt_tokens"] = s.prompt_tokens;
  j["hit_tokens"] = s.hit_tokens;
  j["ideal_hit_ratio"] = s.ideal_hit_ratio;
  j["session_hit_ratio_mean"] = s.session_hit_ratio_mean;
  j["prompt_blocks"] = s.prompt_blocks;
  j["hit_blocks"] = s.hit_blocks;
  j["ideal_block_hit_ratio"] = s.ideal_block_hit_ratio;
  j["block_size"] = s.block_size;
  std::cout << j.dump(2) << "\n";
}

// One line per turn: session index, turn index, append, generated tokens (docs/trace.md, "The
// shape against real sessions": scripts/trace/shape_compare.py reads it).
Status WriteTurnsCsv(const trace::Workload& w, const std::string& path) {
  std::ostringstream os;
  os << "session,turn,append,gen\n";
  for (size_t i = 0; i < w.sessions.size(); ++i) {
    const std::vector<trace::Turn>& turns = w.sessions[i].turns;
    for (size_t t = 0; t < turns.size(); ++t) {
      os << i << ',' << t << ',' << turns[t].append_tokens << ',' << turns[t].gen_tokens << '\n';
    }
  }
  return WriteOutputFile(path, os.str(), "--turns-csv");
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* trace = GetOrAddGroup(root, "trace", "Workload traces: readers and generators");
  trace->require_subcommand(1);
  auto opts = std::make_shared<StatsOptions>();
  CLI::App* stats = trace->add_subcommand(
      "stats", "Print sessions, turns, append/gen/context means and the ideal hit ratio");
  stats->add_option("input", opts->input,
                    "Mooncake .jsonl, WEKA trace_NNNN.json, or a directory of WEKA sessions");
  stats->add_option("--synthetic", opts->synthetic,
                    "Generate DualPath Table-2 trajectories with this MaxLen (32K, 48K, 64K)");
  stats->add_option("--format", opts->format, "auto|mooncake|weka (default: by extension)")
      ->check(CLI::IsMember({"auto", "mooncake", "weka"}));
  stats->add_option("--sessions", opts->sessions, "Synthetic: number of trajectories")
      ->check(CLI::Range(1u, 10000000u));
  stats->add_option("--seed", opts->seed, "Synthetic: random seed");
  stats
      ->add_option("--block-size", opts->block_size,
                   "Tokens per KV block for hits of traces without hash ids (default 64)")
      ->check(CLI::Range(1u, 1u << 20));
  stats->add_option("--scale-append", opts->scale_append,
                    "Synthetic: multiply appends, then truncate at MaxLen (paper Figure 9)");
  stats->add_option("--scale-gen", opts->scale_gen,
                    "Synthetic: multiply generations, then truncate at MaxLen (paper Figure 9)");
  stats->add_flag("--infer-sessions", opts->infer_sessions,
                  "Mooncake: group requests into conversations by their hash-id chains");
  stats->add_flag("--json", opts->json, "Print JSON instead of a table");
  stats->add_option("--turns-csv", opts->turns_csv,
                    "Also write session,turn,append,gen per turn to this CSV file");
  stats->callback([opts, exit_code] {
    Result<trace::Workload> w = LoadWorkload(*opts);
    if (!w.ok()) {
      Status st = w.status();
      if (st.code() == Code::kNotFound) {
        // A path the user named that is not there is bad input (exit 2), not a runtime failure.
        st = Status(Code::kInvalidArgument, st.message());
      }
      *exit_code = ReportError("trace stats", st);
      return;
    }
    if (!opts->turns_csv.empty()) {
      if (Status st = WriteTurnsCsv(*w, opts->turns_csv); !st.ok()) {
        *exit_code = ReportError("trace stats", st);
        return;
      }
    }
    const trace::WorkloadStats s = trace::ComputeStats(*w, opts->block_size);
    if (opts->json) {
      PrintJson(*w, s);
    } else {
      PrintHuman(*w, s);
    }
    *exit_code = kExitOk;
  });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
