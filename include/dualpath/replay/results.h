// Results of `dualpath cluster run`: per-system summaries, the comparison table, the --json
// document and the --plot PNGs.
//
// The JSON document follows `dualpath sim`'s schema (docs/formats/sim_json.md: "config",
// "results[].system", "mode", "jct_s", "ttft_p50_s", "ttft_p99_s", "ttft_mean_s", "ttst_s",
// "ttst_p50_s",
// "tpot_s", "requests") and adds per result "mismatches" (null when not checked: Oracle),
// "failed", "storage_links" ([{"node", "role", "bytes", "tx_bytes", "seconds", "goodput_bps",
// "utilization", "steady_utilization", "steady_seconds"}]: utilization = achieved read rate / the
// link's goodput), "decode_batches" (DecodeBatches) and "records" (one object per request).
// docs/formats/replay_json.md has every field. Plots: jct.png (JCT per system) and
// storage_<system>.png (each node's storage read rate over time, like the paper's Figure 15) and
// decode_batch_<system>.png (each decode engine's batch size over time), drawn by Debian's gnuplot.
//
// Thread safety: pure functions of their arguments (WriteRunPlots writes files under dir).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/replay/fault.h"
#include "dualpath/replay/replayer.h"

namespace dualpath::replay {

// One node's storage link over one system's run (rx = reads into the node, what DualPath
// balances; tx = its write-behind).
struct LinkUsage {
  std::string node;
  std::string role;  // "prefill" / "decode"
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
  double seconds = 0;             // the run's wall time
  double goodput_bps = 0;         // what a saturated link delivers in counter bytes (bit/s)
  double utilization = 0;         // rx bits / seconds / goodput
  double steady_utilization = 0;  // the same over the steady-state window (0 if none)
  double steady_seconds = 0;
};

// Counter samples during a run: t (wall ns) and per node cumulative rx / tx bytes of its storage
// link.
struct LinkSample {
  Nanos t = 0;
  std::vector<uint64_t> rx;
  std::vector<uint64_t> tx;
};

// What became of a killed engine's buffers (acceptance 4): its buffer region was an owner-bound
// root of its node's shared-memory pool; after the kill the orchestrator runs the pool's recovery
// sweep and looks again.
struct BufferReclaim {
  std::string pool;               // the node's pool file
  std::string root;               // "engine/<name>"
  uint64_t root_bytes = 0;        // the root's size while the engine ran (0: not found then)
  int32_t owner_pid = 0;          // the engine that held it
  bool root_after = true;         // the root still exists after the sweep
  uint64_t used_bytes_after = 0;  // the pool's used bytes after the sweep
  uint64_t reclaimed_roots = 0;   // owner-bound roots the pool's sweeps dropped since the check
  uint64_t total_pins_after = 0;  // pins left in the pool after the sweep
  bool reclaimed() const { return root_bytes > 0 && !root_after && reclaimed_roots > 0; }
};

struct SystemRun {
  std::string system;  // "basic" | "dualpath" | "oracle"
  ReplayResult replay;
  std::optional<uint64_t> mismatches;    // nullopt: not checked (Oracle's outputs are not real)
  std::vector<uint64_t> mismatched_ids;  // request ids of the mismatches
  std::vector<LinkUsage> links;          // one per node, cluster order
  std::vector<LinkSample> samples;
  std::string killed_engine;                    // node whose engine was killed mid-run ("" if none)
  std::optional<BufferReclaim> killed_buffers;  // engines ran with pools and one was killed
  std::optional<FaultOutcome> fault;            // `--fault`: what was injected, the recovery
  // `--store`: the store's report (a JSON object: the leader's Stats, the engines' store counters
  // and their sums); empty without a store (and then absent from the results).
  std::string kv_store_json;
  // The prefill engines' forward batches (a JSON array, one object per PE: its --batch-stats
  // file, docs/engine.md "Prefill batching"); empty if none wrote one (absent from the results).
  std::string prefill_batches_json;
  // The KV substrate's counters (a JSON object: kv_substrate, compute_link_kv_bytes and the rack
  // pool's bytes summed over the engines, and each engine's --kv-stats); empty if none wrote one.
  std::string kv_substrate_json;
};

struct Summary {
  double jct_s = 0;  // first submit to last result
  double ttft_p50_s = 0, ttft_p99_s = 0, ttft_mean_s = 0;
  double ttst_s = 0;      // mean
  double ttst_p50_s = 0;  // median (the decode engine's batching shows here first)
  double tpot_s = 0;      // mean over requests with gen > 1
  // TTST's pieces (RequestRecord::HandoffS, DecodeWaitS), medians over the requests stamped.
  double handoff_p50_s = 0;
  double decode_wait_p50_s = 0;
  double de_ttst_p50_s = 0;  // RequestRecord::DeTtstS, requests with gen > 1
  uint64_t requests = 0;
  uint64_t failed = 0;  // results with ok = false
};

Summary Summarize(const ReplayResult& r);

// One decode engine's decode batch over a run, from its results' stamps: a request is in the
// batch from decode_start_ns (taken in at a step boundary) to done_ns (retired after its last
// step), so the count of such intervals open at a time is the size of the steps run then (a
// serial engine's is 0 or 1; requests with gen_tokens = 1 run no step and are left out).
struct DecodeBatchSeries {
  uint32_t decode_engine = 0;
  // Step function: `batch[i]` requests from `t_s[i]` (seconds since the replay's start) until
  // `t_s[i + 1]`; the last entry is 0 (idle after the last request).
  std::vector<double> t_s;
  std::vector<uint32_t> batch;
  double busy_s = 0;               // time with batch >= 1
  std::vector<double> time_share;  // [k]: share of busy_s with batch == k ([0] unused, 0)
  double mean = 0;                 // time-weighted mean batch while busy
  uint32_t max = 0;
};
std::vector<DecodeBatchSeries> DecodeBatches(const ReplayResult& r);

// Per-link usage from counters read before and after the run (and, for the steady window, the
// samples). goodput_bps per node.
std::vector<LinkUsage> ComputeLinkUsage(const std::vector<std::string>& nodes,
                                        const std::vector<std::string>& roles,
                                        const LinkSample& before, const LinkSample& after,
                                        const std::vector<LinkSample>& samples,
                                        const std::vector<double>& goodput_bps, Nanos steady_start,
                                        Nanos steady_end);

// config_json: a JSON object describing the run (cluster, workload, model).
std::string RunJson(const std::string& config_json, const std::vector<SystemRun>& runs);
std::string RunTable(const std::vector<SystemRun>& runs);
Status WriteRunPlots(const std::vector<SystemRun>& runs, const std::string& dir);

}  // namespace dualpath::replay
