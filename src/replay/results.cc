#include "dualpath/replay/results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "dualpath/common/file.h"
#include "dualpath/common/stats.h"

namespace dualpath::replay {
namespace {

using nlohmann::json;

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

const char* SideName(pb::ReadSide side) {
  switch (side) {
    case pb::READ_SIDE_PREFILL:
      return "prefill";
    case pb::READ_SIDE_DECODE:
      return "decode";
    case pb::READ_SIDE_SPLIT:
      return "split";
    case pb::READ_SIDE_NONE:
      return "none";
    default:
      return "unspecified";
  }
}

// Index of the first sample at or after t (samples.size() if none).
size_t FirstAtOrAfter(const std::vector<LinkSample>& samples, Nanos t) {
  size_t i = 0;
  while (i < samples.size() && samples[i].t < t) ++i;
  return i;
}

json Seconds(double s) { return s < 0 ? json(nullptr) : json(s); }

}  // namespace

Summary Summarize(const ReplayResult& r) {
  Summary s;
  s.jct_s = r.JctS();
  std::vector<double> ttft, ttst, tpot, handoff, decode_wait, de_ttst;
  for (const RequestRecord& rec : r.records) {
    ++s.requests;
    if (!rec.result.ok()) {
      ++s.failed;
      continue;
    }
    if (double v = rec.TtftS(); v >= 0) ttft.push_back(v);
    if (double v = rec.TtstS(); v >= 0 && rec.gen_tokens > 1) ttst.push_back(v);
    if (double v = rec.TpotS(); v >= 0 && rec.gen_tokens > 1) tpot.push_back(v);
    if (double v = rec.HandoffS(); v >= 0) handoff.push_back(v);
    if (double v = rec.DecodeWaitS(); v >= 0) decode_wait.push_back(v);
    if (double v = rec.DeTtstS(); v >= 0 && rec.gen_tokens > 1) de_ttst.push_back(v);
  }
  s.ttft_p50_s = Percentile(ttft, 0.5);
  s.ttft_p99_s = Percentile(ttft, 0.99);
  s.ttft_mean_s = Mean(ttft);
  s.ttst_s = Mean(ttst);
  s.ttst_p50_s = Percentile(ttst, 0.5);
  s.tpot_s = Mean(tpot);
  s.handoff_p50_s = Percentile(handoff, 0.5);
  s.decode_wait_p50_s = Percentile(decode_wait, 0.5);
  s.de_ttst_p50_s = Percentile(de_ttst, 0.5);
  return s;
}

std::vector<DecodeBatchSeries> DecodeBatches(const ReplayResult& r) {
  // Per decode engine: +1 at each request's decode start, -1 at its done, swept in time order.
  // At equal times the retirements go first: a request retired after a step and one taken in
  // for the next are never in the same step.
  std::map<uint32_t, std::vector<std::pair<Nanos, int>>> events;
  for (const RequestRecord& rec : r.records) {
    const pb::Timing& t = rec.result.timing();
    if (!rec.result.ok() || rec.gen_tokens < 2 || t.decode_start_ns() <= 0 ||
        t.done_ns() < t.decode_start_ns()) {
      continue;
    }
    auto& e = events[rec.result.decode_engine()];
    e.emplace_back(t.decode_start_ns(), +1);
    e.emplace_back(t.done_ns(), -1);
  }
  std::vector<DecodeBatchSeries> out;
  for (auto& [engine, e] : events) {
    std::sort(e.begin(), e.end());  // (t, -1) before (t, +1)
    DecodeBatchSeries s;
    s.decode_engine = engine;
    std::vector<double> busy_by_size;
    int64_t n = 0;
    for (size_t i = 0; i < e.size(); ++i) {
      n += e[i].second;
      // One point per distinct time: the count after every event at that time.
      if (i + 1 < e.size() && e[i + 1].first == e[i].first) continue;
      const auto size = static_cast<uint32_t>(n);
      s.t_s.push_back(ToSeconds(e[i].first - r.start_ns));
      s.batch.push_back(size);
      s.max = std::max(s.max, size);
      if (size > 0 && i + 1 < e.size()) {
        if (busy_by_size.size() <= size) busy_by_size.resize(size + 1, 0);
        busy_by_size[size] += ToSeconds(e[i + 1].first - e[i].first);
      }
    }
    double weighted = 0;
    for (size_t k = 1; k < busy_by_size.size(); ++k) {
      s.busy_s += busy_by_size[k];
      weighted += static_cast<double>(k) * busy_by_size[k];
    }
    s.time_share.assign(busy_by_size.size(), 0);
    if (s.busy_s > 0) {
      for (size_t k = 1; k < busy_by_size.size(); ++k) s.time_share[k] = busy_by_size[k] / s.busy_s;
      s.mean = weighted / s.busy_s;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<LinkUsage> ComputeLinkUsage(const std::vector<std::string>& nodes,
                                        const std::vector<std::string>& roles,
                                        const LinkSample& before, const LinkSample& after,
                                        const std::vector<LinkSample>& samples,
                                        const std::vector<double>& goodput_bps, Nanos steady_start,
                                        Nanos steady_end) {
  std::vector<LinkUsage> out;
  const double secs = ToSeconds(after.t - before.t);
  // The steady window, snapped to the samples inside it.
  const size_t a = FirstAtOrAfter(samples, steady_start);
  size_t b = FirstAtOrAfter(samples, steady_end);
  if (b == samples.size() || (b < samples.size() && samples[b].t > steady_end)) {
    b = b == 0 ? 0 : b - 1;  // last sample at or before steady_end
  }
  const bool steady = steady_end > steady_start && a < samples.size() && b < samples.size() &&
                      b > a && samples[b].t > samples[a].t;
  for (size_t n = 0; n < nodes.size(); ++n) {
    LinkUsage u;
    u.node = nodes[n];
    u.role = n < roles.size() ? roles[n] : "";
    u.rx_bytes = after.rx[n] - before.rx[n];
    if (n < after.tx.size() && n < before.tx.size()) u.tx_bytes = after.tx[n] - before.tx[n];
    u.seconds = secs;
    u.goodput_bps = n < goodput_bps.size() ? goodput_bps[n] : 0;
    if (secs > 0 && u.goodput_bps > 0) {
      u.utilization = static_cast<double>(u.rx_bytes) * 8 / secs / u.goodput_bps;
    }
    if (steady && u.goodput_bps > 0) {
      u.steady_seconds = ToSeconds(samples[b].t - samples[a].t);
      u.steady_utilization = static_cast<double>(samples[b].rx[n] - samples[a].rx[n]) * 8 /
                             u.steady_seconds / u.goodput_bps;
    }
    out.push_back(u);
  }
  return out;
}

namespace {

json BuffersJson(const std::optional<BufferReclaim>& buffers) {
  if (!buffers) return nullptr;
  const BufferReclaim& b = *buffers;
  return {{"pool", b.pool},
          {"root", b.root},
          {"root_bytes", b.root_bytes},
          {"owner_pid", b.owner_pid},
          {"reclaimed", b.reclaimed()},
          {"pool_used_bytes_after", b.used_bytes_after},
          {"pool_pins_after", b.total_pins_after},
          {"reclaimed_roots", b.reclaimed_roots}};
}

json LinksJson(const std::vector<LinkUsage>& usage) {
  json links = json::array();
  for (const LinkUsage& u : usage) {
    links.push_back({{"node", u.node},
                     {"role", u.role},
                     {"bytes", u.rx_bytes},
                     {"tx_bytes", u.tx_bytes},
                     {"seconds", u.seconds},
                     {"goodput_bps", u.goodput_bps},
                     {"utilization", u.utilization},
                     {"steady_utilization", u.steady_utilization},
                     {"steady_seconds", u.steady_seconds}});
  }
  return links;
}

json RecordsJson(const SystemRun& run) {
  const std::set<uint64_t> bad(run.mismatched_ids.begin(), run.mismatched_ids.end());
  json recs = json::array();
  for (const RequestRecord& r : run.replay.records) {
    const pb::RequestResult& res = r.result;
    recs.push_back(
        {{"request_id", r.request_id},
         {"agent", r.agent},
         {"turn", r.turn},
         {"prompt_tokens", r.prompt_tokens},
         {"gen_tokens", r.gen_tokens},
         {"hit_tokens", r.hit_tokens},
         {"loaded_tokens", res.loaded_tokens()},
         {"side", SideName(res.side())},
         {"ok", res.ok()},
         {"error", res.error()},
         {"attempt", res.attempt()},
         {"prefill_engine", res.prefill_engine()},
         {"decode_engine", res.decode_engine()},
         {"read_bytes_prefill", res.read_bytes_prefill()},
         {"read_bytes_decode", res.read_bytes_decode()},
         {"submit_s", ToSeconds(r.submit_ns - run.replay.start_ns)},
         {"done_s", ToSeconds(r.result_ns - run.replay.start_ns)},
         {"ttft_s", Seconds(r.TtftS())},
         {"ttst_s", Seconds(r.TtstS())},
         {"tpot_s", Seconds(r.TpotS())},
         {"queue_s", Seconds(r.QueueS())},
         {"prefill_s", Seconds(r.PrefillS())},
         {"decode_s", Seconds(r.DecodeS())},
         {"handoff_s", Seconds(r.HandoffS())},
         {"decode_wait_s", Seconds(r.DecodeWaitS())},
         {"de_ttst_s", Seconds(r.DeTtstS())},
         {"submit_rpc_s", Seconds(r.SubmitRpcS())},
         {"retire_s", Seconds(r.RetireS())},
         {"report_s", Seconds(r.ReportS())},
         {"deliver_s", Seconds(r.DeliverS())},
         {"mismatch", run.mismatches ? json(bad.count(r.request_id) > 0) : json(nullptr)}});
  }
  return recs;
}

json DecodeBatchesJson(const ReplayResult& r) {
  json a = json::array();
  for (const DecodeBatchSeries& s : DecodeBatches(r)) {
    a.push_back({{"decode_engine", s.decode_engine},
                 {"t_s", s.t_s},
                 {"batch", s.batch},
                 {"busy_s", s.busy_s},
                 {"time_share", s.time_share},
                 {"mean", s.mean},
                 {"max", s.max}});
  }
  return a;
}

// `--fault` (docs/faults.md): null without one; times are seconds from the replay's start.
json FaultJson(const SystemRun& run) {
  if (!run.fault) return nullptr;
  const FaultOutcome& f = *run.fault;
  const Nanos t0 = run.replay.start_ns;
  return {{"spec", f.spec.ToString()},
          {"kind", FaultKindName(f.spec.kind)},
          {"injected", f.injected},
          {"start_s", f.injected ? json(ToSeconds(f.start_ns - t0)) : json(nullptr)},
          {"end_s", f.injected ? json(ToSeconds(f.end_ns - t0)) : json(nullptr)},
          {"results_before", f.results_before},
          {"results_during", f.results_during},
          {"recovery_s", f.recovery_s ? json(*f.recovery_s) : json(nullptr)},
          {"service_restarts", run.replay.service_restarts},
          {"resubmitted", run.replay.resubmitted},
          {"scheduler_resubmissions", f.scheduler_resubmissions},
          {"requests_resubmitted", f.requests_resubmitted},
          {"cut_off_after_s",
           f.cut_off_ns > 0 ? json(ToSeconds(f.cut_off_ns - f.start_ns)) : json(nullptr)},
          {"back_after_s", f.back_ns > 0 ? json(ToSeconds(f.back_ns - f.end_ns)) : json(nullptr)},
          {"results_after_cut_off", f.results_after_cut_off},
          {"detail", f.detail}};
}

json SystemRunJson(const SystemRun& run, bool online) {
  const Summary s = Summarize(run.replay);
  json o;
  o["system"] = run.system;
  o["mode"] = online ? "online" : "offline";
  o["jct_s"] = s.jct_s;
  o["ttft_p50_s"] = s.ttft_p50_s;
  o["ttft_p99_s"] = s.ttft_p99_s;
  o["ttft_mean_s"] = s.ttft_mean_s;
  o["ttst_s"] = s.ttst_s;
  o["ttst_p50_s"] = s.ttst_p50_s;
  o["tpot_s"] = s.tpot_s;
  o["handoff_p50_s"] = s.handoff_p50_s;
  o["decode_wait_p50_s"] = s.decode_wait_p50_s;
  o["de_ttst_p50_s"] = s.de_ttst_p50_s;
  o["requests"] = s.requests;
  o["failed"] = s.failed;
  o["mismatches"] = run.mismatches ? json(*run.mismatches) : json(nullptr);
  o["killed_engine"] = run.killed_engine.empty() ? json(nullptr) : json(run.killed_engine);
  o["killed_engine_buffers"] = BuffersJson(run.killed_buffers);
  o["fault"] = FaultJson(run);
  o["steady_s"] = ToSeconds(run.replay.steady_end_ns - run.replay.steady_start_ns);
  o["storage_links"] = LinksJson(run.links);
  if (!run.kv_store_json.empty()) {
    json k = json::parse(run.kv_store_json, nullptr, /*allow_exceptions=*/false);
    o["kv_store"] = k.is_discarded() ? json(nullptr) : std::move(k);
  }
  o["decode_batches"] = DecodeBatchesJson(run.replay);
  if (!run.prefill_batches_json.empty()) {
    json b = json::parse(run.prefill_batches_json, nullptr, /*allow_exceptions=*/false);
    o["prefill_batches"] = b.is_discarded() ? json(nullptr) : std::move(b);
  }
  if (!run.kv_substrate_json.empty()) {
    json k = json::parse(run.kv_substrate_json, nullptr, /*allow_exceptions=*/false);
    o["kv_substrate"] = k.is_discarded() ? json(nullptr) : std::move(k);
  }
  o["records"] = RecordsJson(run);
  return o;
}

}  // namespace

std::string RunJson(const std::string& config_json, const std::vector<SystemRun>& runs) {
  json j;
  j["config"] = json::parse(config_json);
  const bool online = j["config"].contains("online") && j["config"]["online"].get<bool>();
  j["results"] = json::array();
  for (const SystemRun& run : runs) j["results"].push_back(SystemRunJson(run, online));
  return j.dump(2) + "\n";
}

std::string RunTable(const std::vector<SystemRun>& runs) {
  std::ostringstream os;
  const SystemRun* basic = nullptr;
  for (const SystemRun& r : runs) {
    if (r.system == "basic") basic = &r;
  }
  const double basic_jct = basic ? Summarize(basic->replay).jct_s : 0;
  char line[512];
  std::snprintf(line, sizeof(line), "%-9s %8s %8s %9s %9s %8s %8s %6s %5s  %s\n", "system",
                "JCT (s)", "vs basic", "TTFT p50", "TTFT p99", "TTST", "TPOT", "mism", "fail",
                "storage link util (steady)");
  os << line;
  for (const SystemRun& r : runs) {
    const Summary s = Summarize(r.replay);
    std::string ratio = "       -";
    if (basic_jct > 0) {
      char b[32];
      std::snprintf(b, sizeof(b), "%7.2fx", s.jct_s / basic_jct);
      ratio = b;
    }
    std::string links;
    for (const LinkUsage& u : r.links) {
      char b[96];
      std::snprintf(b, sizeof(b), "%s%s %3.0f%% (%3.0f%%)", links.empty() ? "" : "  ",
                    u.node.c_str(), 100 * u.utilization, 100 * u.steady_utilization);
      links += b;
    }
    std::snprintf(line, sizeof(line), "%-9s %8.2f %s %8.3fs %8.3fs %7.1fms %6.1fms %6s %5llu  %s\n",
                  r.system.c_str(), s.jct_s, ratio.c_str(), s.ttft_p50_s, s.ttft_p99_s,
                  s.ttst_s * 1e3, s.tpot_s * 1e3,
                  r.mismatches ? std::to_string(*r.mismatches).c_str() : "-",
                  static_cast<unsigned long long>(s.failed), links.c_str());
    os << line;
  }
  return os.str();
}

Status WriteRunPlots(const std::vector<SystemRun>& runs, const std::string& dir) {
  RETURN_IF_ERROR(PreparePlotDir(dir));
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1000,600 font 'sans,11'\n";
  {
    std::ostringstream dat;
    for (const SystemRun& r : runs) dat << '"' << r.system << "\" " << r.replay.JctS() << "\n";
    RETURN_IF_ERROR(WriteOutputFile(dir + "/jct.dat", dat.str(), "--plot"));
    // Names relative to gnuplot's private working directory inside `dir` (RunGnuplot, file.h).
    gp << "set output 'jct.png'\n"
       << "set title 'Job completion time per system (emulated cluster)'\n"
       << "set ylabel 'JCT (s)'\nset style fill solid 0.8 border -1\nset boxwidth 0.6\n"
       << "set yrange [0:*]\nset grid ytics\nunset key\n"
       << "plot '../jct.dat' using 0:2:xtic(1) with boxes lc rgb '#4472c4', '' using "
       << "0:2:(sprintf('%.1f',$2)) with labels offset 0,1 notitle\n";
  }
  // Each node's storage read rate between consecutive samples (Mbit/s), paper Figure 15.
  for (const SystemRun& r : runs) {
    if (r.samples.size() < 2 || r.links.empty()) continue;
    const std::string dat_path = dir + "/storage_" + r.system + ".dat";
    std::ostringstream dat;
    const Nanos t0 = r.replay.start_ns;
    // Rates over trailing windows of at least 1 s: per-sample rates at 0.25 s swing between 0
    // and the line rate as individual reads start and stop.
    size_t j = 0;
    for (size_t i = 1; i < r.samples.size(); ++i) {
      while (j + 1 < i && r.samples[i].t - r.samples[j + 1].t >= kNanosPerSecond) ++j;
      const double dt = ToSeconds(r.samples[i].t - r.samples[j].t);
      if (dt <= 0) continue;
      dat << ToSeconds(r.samples[i].t - t0);
      for (size_t n = 0; n < r.links.size(); ++n) {
        dat << ' ' << static_cast<double>(r.samples[i].rx[n] - r.samples[j].rx[n]) * 8 / dt / 1e6;
      }
      dat << '\n';
    }
    RETURN_IF_ERROR(WriteOutputFile(dat_path, dat.str(), "--plot"));
    gp << "reset\nset output 'storage_" << r.system << ".png'\n"
       << "set title 'Storage link read rate per node: " << r.system << "'\n"
       << "set xlabel 'time since first submit (s)'\nset ylabel 'Mbit/s'\nset yrange [0:*]\n"
       << "set grid\nset key outside right\nplot ";
    for (size_t n = 0; n < r.links.size(); ++n) {
      const bool prefill = r.links[n].role == "prefill";
      gp << (n ? ", " : "") << "'../storage_" << r.system << ".dat' using 1:" << (n + 2)
         << " with lines lw 1.5 dt " << (prefill ? 1 : 2) << " title '" << r.links[n].node << "'";
    }
    if (!r.links.empty() && r.links[0].goodput_bps > 0) {
      gp << ", " << r.links[0].goodput_bps / 1e6
         << " with lines lc rgb 'gray' dt 3 title 'goodput'";
    }
    gp << "\n";
  }
  // Each decode engine's batch size over time (a step function: DecodeBatches).
  for (const SystemRun& r : runs) {
    const std::vector<DecodeBatchSeries> series = DecodeBatches(r.replay);
    if (series.empty()) continue;
    gp << "reset\nset output 'decode_batch_" << r.system << ".png'\n"
       << "set title 'Decode batch size per decode engine: " << r.system << "'\n"
       << "set xlabel 'time since first submit (s)'\nset ylabel 'requests in the step'\n"
       << "set yrange [0:*]\nset grid\nset key outside right\nplot ";
    for (size_t k = 0; k < series.size(); ++k) {
      const std::string name =
          "decode_batch_" + r.system + "_" + std::to_string(series[k].decode_engine) + ".dat";
      std::ostringstream dat;
      for (size_t i = 0; i < series[k].t_s.size(); ++i) {
        dat << series[k].t_s[i] << ' ' << series[k].batch[i] << '\n';
      }
      RETURN_IF_ERROR(WriteOutputFile(dir + "/" + name, dat.str(), "--plot"));
      gp << (k ? ", " : "") << "'../" << name << "' using 1:2 with steps lw 1.2 title 'engine "
         << series[k].decode_engine << "'";
    }
    gp << "\n";
  }
  const std::string script = dir + "/plots.gp";
  RETURN_IF_ERROR(WriteOutputFile(script, gp.str(), "--plot"));
  return RunGnuplot(dir, script);
}

}  // namespace dualpath::replay
