#include "dualpath/sim/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dualpath/common/file.h"
#include "sim/config_json.h"

namespace dualpath::sim {
namespace {

using nlohmann::json;

json Num(double v) { return json(v); }
json Null() { return json(nullptr); }

const ReportEntry* FindBasic(const Report& r) {
  for (const ReportEntry& e : r.entries) {
    if (e.result.system == "basic") return &e;
  }
  return nullptr;
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : Null();
}

json RunInfoJson(const RunInfo& run) {
  json j;
  j["model"] = run.model;
  j["pd"] = ClusterShapeName(run.shape);
  j["agents"] = run.agents;
  j["requests"] = run.requests;
  j["workload"] = run.workload;
  j["trajectories"] = OrNull(run.trajectories);
  j["max_len_k"] = run.max_len_k;
  j["mode"] = std::string(RunModeName(run.mode));
  j["aps"] = OrNull(run.aps);
  j["ablation"] = run.ablation;
  j["seed"] = run.seed;
  j["routing"] = run.routing;
  j["trace"] = OrNull(run.trace);
  j["sim"] = SimConfigJson(run.sim);
  return j;
}

}  // namespace

std::string_view RunModeName(RunMode mode) {
  switch (mode) {
    case RunMode::kOffline:
      return "offline";
    case RunMode::kOnline:
      return "online";
    case RunMode::kFindMaxAps:
      return "find-max-aps";
  }
  return "unknown";
}

std::string ReportJson(const Report& report) {
  json j;
  j["config"] = RunInfoJson(report.run);
  j["results"] = json::array();
  for (const ReportEntry& e : report.entries) {
    const SimResult& r = e.result;
    json o;
    o["system"] = r.system;
    o["mode"] = e.online ? "online" : "offline";
    o["jct_s"] = e.online ? Null() : Num(r.jct_s);
    o["ttft_p50_s"] = e.online ? Num(r.ttft_p50_s) : Null();
    o["ttft_p99_s"] = e.online ? Num(r.ttft_p99_s) : Null();
    o["ttft_mean_s"] = e.online ? Num(r.ttft_mean_s) : Null();
    o["ttst_s"] = e.online ? Num(r.ttst_mean_s) : Null();
    o["tpot_s"] = e.online ? Num(r.tpot_mean_s) : Null();
    o["snic_max_over_avg"] = r.snic_max_over_avg;
    o["snic_max_over_avg_unweighted"] = r.snic_max_over_avg_unweighted;
    o["attn_max_over_avg"] = r.attn_max_over_avg;
    o["max_aps"] = e.max_aps ? Num(*e.max_aps) : Null();
    o["mean_agent_jct_s"] = r.mean_agent_jct_s;
    o["snic_avg_utilization"] = r.snic_avg_utilization;
    o["prefill_busy_fraction"] = r.prefill_busy_fraction;
    o["requests"] = r.requests;
    const TooLongRequests& t = r.too_long;
    o["too_long"] = {{"requests", t.requests},
                     {"prefill", t.prefill},
                     {"decode", t.decode},
                     {"prefill_capacity_tokens",
                      t.prefill_capacity_tokens > 0 ? json(t.prefill_capacity_tokens) : Null()},
                     {"decode_capacity_tokens", t.decode_capacity_tokens}};
    o["agents"] = r.agents;
    o["events"] = r.events;
    const AgentPath& p = r.last_agent;
    o["last_agent"] = {
        {"agent", p.agent},      {"turns", p.turns},       {"generated_tokens", p.generated_tokens},
        {"start_s", p.start_s},  {"finish_s", p.finish_s}, {"to_first_token_s", p.to_first_token_s},
        {"decode_s", p.decode_s}};
    j["results"].push_back(std::move(o));
  }
  j["wall_s"] = report.wall_s;
  j["sim_requests_per_s"] = report.sim_requests_per_s;
  return j.dump(2) + "\n";
}

std::string ReportTable(const Report& report) {
  std::ostringstream os;
  const ReportEntry* basic = FindBasic(report);
  const bool online = !report.entries.empty() && report.entries.front().online;
  bool any_aps = false;
  for (const ReportEntry& e : report.entries) any_aps = any_aps || e.max_aps.has_value();
  char line[256];
  if (online) {
    std::snprintf(line, sizeof(line), "%-15s %9s %9s %9s %9s %9s %10s %9s%s\n", "system",
                  "TTFT avg", "TTFT p50", "TTFT p99", "TTST", "TPOT", "agent JCT", "SNIC m/a",
                  any_aps ? "   max APS" : "");
  } else {
    std::snprintf(line, sizeof(line), "%-15s %10s %9s %10s %10s %9s %9s%s\n", "system", "JCT (s)",
                  "speedup", "vs basic", "SNIC util", "SNIC m/a", "attn m/a",
                  any_aps ? "   max APS" : "");
  }
  os << line;
  for (const ReportEntry& e : report.entries) {
    const SimResult& r = e.result;
    std::string aps = e.max_aps ? Fmt("%10.3f", *e.max_aps) : (any_aps ? "         -" : "");
    if (online) {
      std::snprintf(line, sizeof(line),
                    "%-15s %8.3fs %8.3fs %8.3fs %8.3fs %7.1fms %9.0fs %9.2f%s\n", r.system.c_str(),
                    r.ttft_mean_s, r.ttft_p50_s, r.ttft_p99_s, r.ttst_mean_s, r.tpot_mean_s * 1e3,
                    r.mean_agent_jct_s, r.snic_max_over_avg, aps.c_str());
    } else {
      // Speedup and JCT change relative to Basic; "-" when Basic was not run.
      std::string speedup = "        -", change = "         -";
      if (basic != nullptr) {
        speedup = Fmt("%8.2fx", basic->result.jct_s / r.jct_s);
        change = Fmt("%9.1f%%", 100.0 * (r.jct_s / basic->result.jct_s - 1) + 0.0);
      }
      std::snprintf(line, sizeof(line), "%-15s %10.0f %s %s %9.1f%% %9.2f %9.2f%s\n",
                    r.system.c_str(), r.jct_s, speedup.c_str(), change.c_str(),
                    100 * r.snic_avg_utilization, r.snic_max_over_avg, r.attn_max_over_avg,
                    aps.c_str());
    }
    os << line;
  }
  if (!online) {
    // The critical path: no throughput gain shortens the last agent's turns, run one after the
    // other (docs/sim.md "Results").
    os << "last agent to finish (the critical path):\n";
    for (const ReportEntry& e : report.entries) {
      const AgentPath& p = e.result.last_agent;
      const double per_token =
          p.generated_tokens ? 1e3 * p.decode_s / static_cast<double>(p.generated_tokens) : 0;
      std::snprintf(line, sizeof(line),
                    "  %-13s agent %llu, %llu turns, %llu tokens generated: %.0f s to first "
                    "tokens + %.0f s decoding (%.1f ms/token)\n",
                    e.result.system.c_str(), static_cast<unsigned long long>(p.agent),
                    static_cast<unsigned long long>(p.turns),
                    static_cast<unsigned long long>(p.generated_tokens), p.to_first_token_s,
                    p.decode_s, per_token);
      os << line;
    }
  }
  // Requests no engine could hold, refused on arrival (docs/sim.md "Requests too long for an
  // engine"); printed only when there were some, so other runs' output is unchanged.
  bool any_too_long = false;
  for (const ReportEntry& e : report.entries) any_too_long |= e.result.too_long.requests > 0;
  if (any_too_long) {
    os << "requests too long for any engine (refused, as an engine refuses a prompt over its "
          "maximum):\n";
    for (const ReportEntry& e : report.entries) {
      const SimResult& r = e.result;
      const TooLongRequests& t = r.too_long;
      const std::string prefill = t.prefill_capacity_tokens > 0
                                      ? std::to_string(t.prefill) + " over the prefill HBM's " +
                                            std::to_string(t.prefill_capacity_tokens) + " tokens"
                                      : "no prefill limit (layerwise)";
      std::snprintf(line, sizeof(line),
                    "  %-13s %llu of %llu requests: %s; %llu over the decode HBM's %lld tokens "
                    "(prompt + generation)\n",
                    r.system.c_str(), static_cast<unsigned long long>(t.requests),
                    static_cast<unsigned long long>(t.requests + r.requests), prefill.c_str(),
                    static_cast<unsigned long long>(t.decode),
                    static_cast<long long>(t.decode_capacity_tokens));
      os << line;
    }
    os << "  (JCTs and speedups of systems that refused different requests compare different "
          "work)\n";
  }
  std::snprintf(line, sizeof(line), "simulated %.0f requests/s of wall time; wall %.2f s\n",
                report.sim_requests_per_s, report.wall_s);
  os << line;
  return os.str();
}

namespace {

// JCT (offline) or TTFT (online) per system: a bar chart.
Status PlotJct(const Report& report, const std::string& dir, std::ostringstream& script) {
  std::ostringstream dat;
  for (const ReportEntry& e : report.entries) {
    dat << '"' << e.result.system << "\" " << (e.online ? e.result.ttft_mean_s : e.result.jct_s)
        << "\n";
  }
  RETURN_IF_ERROR(WriteOutputFile(dir + "/jct.dat", dat.str(), "--plot"));
  const bool online = !report.entries.empty() && report.entries.front().online;
  // Names relative to gnuplot's private working directory inside `dir` (RunGnuplot, file.h).
  script << "set output 'jct.png'\n"
         << "set title '" << (online ? "Mean TTFT per system" : "Job completion time per system")
         << "'\nset ylabel '" << (online ? "TTFT (s)" : "JCT (s)") << "'\n"
         << "set style fill solid 0.8 border -1\nset boxwidth 0.6\nset yrange [0:*]\n"
         << "set grid ytics\nunset key\n"
         << "plot '../jct.dat' using 0:2:xtic(1) with boxes lc rgb '#4472c4', '' using "
            "0:2:(sprintf('%.0f',$2)) "
            "with labels offset 0,1 notitle\n";
  return Status::Ok();
}

// Storage-NIC read utilization over time, one line per node (paper Figure 15).
Status PlotSnic(const SimResult& r, double window_s, const std::string& dir,
                std::ostringstream& script) {
  const std::string dat_path = dir + "/snic_" + r.system + ".dat";
  std::ostringstream dat;
  const size_t windows = r.snic_util.front().size();
  // Average over groups of windows so a long run stays readable (~400 points).
  const size_t step = std::max<size_t>(1, windows / 400);
  for (size_t w = 0; w + step <= windows; w += step) {
    dat << w;  // window index; scaled to seconds below
    for (const auto& node : r.snic_util) {
      double s = 0;
      for (size_t k = w; k < w + step; ++k) s += node[k];
      dat << ' ' << 100.0 * s / static_cast<double>(step);
    }
    dat << '\n';
  }
  RETURN_IF_ERROR(WriteOutputFile(dat_path, dat.str(), "--plot"));
  script << "reset\nset output 'snic_" << r.system << ".png'\n"
         << "set title 'Storage NIC read utilization per node: " << r.system << "'\n"
         << "set xlabel 'time (s)'\nset ylabel 'utilization (%)'\nset yrange [0:110]\n"
         << "set grid\nset key outside right\n";
  script << "plot ";
  const size_t nodes = r.snic_util.size();
  // Keep the plot readable for big clusters: at most 12 nodes drawn, prefill nodes first.
  const size_t shown = std::min<size_t>(nodes, 12);
  for (size_t n = 0; n < shown; ++n) {
    const size_t idx = n < shown / 2 || nodes <= 12 ? n : nodes - (shown - n);
    const bool prefill = r.node_is_prefill[idx];
    size_t pcount = 0;
    for (size_t k = 0; k < idx; ++k) pcount += r.node_is_prefill[k] ? 1 : 0;
    const std::string name =
        prefill ? "P" + std::to_string(pcount) : "D" + std::to_string(idx - pcount);
    script << (n ? ", " : "") << "'../snic_" << r.system << ".dat' using ($1*" << window_s
           << "):" << (idx + 2) << " with lines lw 1.5 dt " << (prefill ? 1 : 2) << " title '"
           << name << "'";
  }
  script << "\n";
  return Status::Ok();
}

// Decode side over time: requests per decode GPU and the decode step time (what paces TPOT and
// an offline run's critical path, docs/sim.md).
Status PlotDecode(const SimResult& r, double window_s, const std::string& dir,
                  std::ostringstream& script) {
  const size_t windows = r.decode_batch_per_gpu.size();
  const std::string dat_path = dir + "/decode_" + r.system + ".dat";
  std::ostringstream dat;
  const size_t step = std::max<size_t>(1, windows / 400);
  for (size_t w = 0; w + step <= windows; w += step) {
    double batch = 0, tau = 0;
    size_t active = 0;
    for (size_t k = w; k < w + step; ++k) {
      batch += r.decode_batch_per_gpu[k];
      if (r.decode_step_ms[k] > 0) {
        tau += r.decode_step_ms[k];
        active++;
      }
    }
    dat << w << ' ' << batch / static_cast<double>(step) << ' '
        << (active ? tau / static_cast<double>(active) : 0.0) << '\n';
  }
  RETURN_IF_ERROR(WriteOutputFile(dat_path, dat.str(), "--plot"));
  script << "reset\nset output 'decode_" << r.system << ".png'\n"
         << "set title 'Decode side: " << r.system << "'\n"
         << "set xlabel 'time (s)'\nset ylabel 'requests in decode per decode GPU'\n"
         << "set y2label 'decode step (ms)'\nset ytics nomirror\nset y2tics\n"
         << "set yrange [0:*]\nset y2range [0:*]\nset grid\nset key top right\n"
         << "plot '../decode_" << r.system << ".dat' using ($1*" << window_s
         << "):2 with lines lw 1.5 title 'batch per GPU', '' using ($1*" << window_s
         << "):($3 > 0 ? $3 : 1/0) axes x1y2 with lines lw 1.5 dt 2 title 'step time'\n";
  return Status::Ok();
}

}  // namespace

Status WritePlots(const Report& report, const std::string& dir) {
  RETURN_IF_ERROR(PreparePlotDir(dir));
  // A long run's windows are wider than the configured ones (SimResult::window_s).
  auto window_of = [&](const SimResult& r) {
    return r.window_s > 0 ? r.window_s : report.run.sim.snic_window_s;
  };
  std::ostringstream script;
  script << "set terminal pngcairo size 1000,600 font 'sans,11'\n";
  RETURN_IF_ERROR(PlotJct(report, dir, script));
  for (const ReportEntry& e : report.entries) {
    if (e.result.snic_util.empty()) continue;
    RETURN_IF_ERROR(PlotSnic(e.result, window_of(e.result), dir, script));
  }
  for (const ReportEntry& e : report.entries) {
    if (e.result.decode_batch_per_gpu.empty()) continue;
    RETURN_IF_ERROR(PlotDecode(e.result, window_of(e.result), dir, script));
  }
  const std::string gp = dir + "/plots.gp";
  RETURN_IF_ERROR(WriteOutputFile(gp, script.str(), "--plot"));
  return RunGnuplot(dir, gp);  // the one gnuplot runner (common/file.h)
}

}  // namespace dualpath::sim
