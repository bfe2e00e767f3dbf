// `dualpath cluster run`: the whole end-to-end comparison on the emulated cluster (docs/e2e.md,
// docs/replay.md).
//
// RunOnCluster brings the testbed up if the named cluster is not up (and down again at the end
// unless `keep`, or it was up already), measures each node's storage-link goodput, then for each
// system: starts `dualpath control serve` on a Unix socket in the cluster's state directory with a
// fresh store subdirectory, one `dualpath engine` per node inside the node's network namespace
// (`ip netns exec`), waits until every engine has registered, replays the workload while sampling
// every node's storage-link counters, sends Shutdown, waits for every child (killing any that
// overstays) and removes the store subdirectory. Engines run with their node's shared-memory pool
// (`--pool`) unless options.pool is off; the pool files go at the end of the run. Afterwards it
// recomputes every request with the reference model and counts mismatches (not for Oracle, whose
// hit KV is zeros).
//
// Ownership: RunOnCluster owns every process it starts and reaps all of them on every path, error
// paths included (Child's destructor); the cluster it brought up is torn down on every path unless
// keep. Thread safety: one call at a time per cluster name.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/replay/fault.h"
#include "dualpath/replay/replayer.h"
#include "dualpath/replay/results.h"
#include "dualpath/replay/workload.h"

namespace dualpath::replay {

// Input ranges of `cluster run` (docs/replay.md "Input ranges"), checked by RunOnCluster before
// the cluster is touched.
inline constexpr double kMinRunAps = 0.001;  // below, arrivals spread over weeks
inline constexpr double kMaxRunAps = 10'000;
inline constexpr double kMaxRunTimeoutS = 7 * 24 * 3600.0;  // a week per system
inline constexpr double kMinSampleIntervalS = 0.01;         // below, the sampler spins
inline constexpr double kMaxSampleIntervalS = 60;           // above, a run has no rate series
inline constexpr double kMinRunHeartbeatS = 0.01;  // control serve's range (docs/control.md)
inline constexpr double kMaxRunHeartbeatS = 3600;
// --store-ttl: the store nodes' membership and the masters' leader lease (`store node --ttl`
// accepts 1 .. 3600 s; above a minute a dead node or leader would outlast a test run's patience).
inline constexpr double kMinStoreTtlS = 1;
inline constexpr double kMaxStoreTtlS = 60;

struct ClusterRunOptions {
  std::string name = "dp";  // testbed cluster name
  std::string pd = "1P1D";
  bool pd_given = false;  // --pd on the command line: an existing cluster must match it
  uint64_t stor_rate_bps = 400'000'000;
  uint64_t comp_rate_bps = 2'000'000'000;
  std::vector<std::string> systems = {"basic", "dualpath"};
  WorkloadOptions workload;
  ReplayOptions replay;
  std::string model_spec;  // model::RefModelConfig::Parse format; empty: the defaults
  uint32_t block_tokens = 64;
  bool keep = false;  // leave the cluster (and the store directories) up afterwards
  bool check = true;  // recompute and count mismatches
  unsigned check_threads = 0;
  // "measure": read a file through every node's mount at once (testbed::MeasureRead) and use the
  // link-counter rate; "nominal": 0.956 x the shaped rate (a saturated link's counter rate,
  // docs/testbed.md).
  std::string goodput = "measure";
  uint64_t goodput_file_bytes = 32ull << 20;
  double sample_interval_s = 0.25;
  double heartbeat_s = 1.0;
  double start_timeout_s = 60;  // service + engines registered
  double stop_timeout_s = 20;   // engines exit after Shutdown
  std::string dualpath_bin;     // empty: this executable (/proc/self/exe)
  // `control serve --routing`: which prefill engine takes an agent's turn (dualpath/sched/
  // routing.h: dualpath, round-robin or sticky); checked before the cluster is touched.
  std::string routing = "dualpath";
  std::vector<std::string> service_args;  // extra arguments for `control serve`
  std::vector<std::string> engine_args;   // extra arguments for every `engine`
  // Engines keep their buffers in their node's shared-memory pool (`engine --pool`), one pool
  // file per node, NodePoolPath(), removed at the end of the run on every path. After an engine
  // is killed (`--fault engine:NODE@TRIGGER`) its node's pool is swept and the engine's buffer
  // root checked reclaimed.
  bool pool = true;
  // `--fault SPEC` (dualpath/replay/fault.h, docs/faults.md): injected into each system's replay,
  // undone after its duration; its recovery time is measured and a fault that never happened
  // fails the run. `engine:NODE` kills that node's engine (not undone): the service must
  // reschedule its requests and the outputs must still check.
  std::optional<FaultSpec> fault;
  // Prometheus metrics (docs/metrics.md): every service and engine serves /metrics on a socket
  // the orchestrator binds on metrics_host for the whole run (replay/cluster_metrics.h) and waits
  // up to metrics_wait_s for its last scrape. metrics_config: write a prometheus.yml scraping them;
  // metrics_targets: write a Prometheus file_sd target file.
  bool metrics = false;
  // The distributed KV store (issue 16, docs/store.md "In the system"): for each system, one
  // etcd, two store masters and one store node per node (children of the run, replay/run_store.h)
  // with store_dram_mib of DRAM each; engines read hit blocks their node's tier lacks from the
  // store and put every block they write; the service's hit probe asks the leader master. The
  // service then runs in the first node's namespace (it must reach etcd and the masters on the
  // compute network; its socket is a file and works from there).
  bool store = false;
  uint64_t store_dram_mib = 256;
  // The store nodes' etcd membership lease and the masters' leader lease, seconds: a killed node
  // is dropped, a killed leader replaced, within about this long (--fault store-node|store-leader).
  double store_ttl_s = 10;
  // Node-local persistent tiers: each node's engine keeps its blocks in a directory of its own,
  // <store subdir>-<node>, on its own mount (reads still cross its storage link; no node sees
  // another's blocks); the service probes all of them (a block counts when any node has it; the
  // engine that gets the request loads what its tier, or the store, has and recomputes the rest).
  bool local_tiers = false;
  // The KV substrate between PE and DE (issue 29, docs/e2e.md "KV substrate"): "ucx" (puts over
  // the compute link) or "rack-pool" (objects in the cluster's rack pool, only notices on the
  // compute link). rack-pool uses the rack pool `cluster up --rack-pool` made, or starts one for
  // the run (replay/rack_pool.h: rack_pool_model, rack_pool_bytes, removed at the end).
  std::string kv_substrate = "ucx";
  std::string rack_pool_model = "coherent";
  // With rack-pool: "on" (default) the region is also the rack-wide prefix cache (engines look hit
  // blocks up there before storage and publish new blocks there), "off" it carries PE<->DE KV only.
  std::string rack_prefix_cache = "on";
  uint64_t rack_pool_bytes = 512ull << 20;
  std::string metrics_host = "127.0.0.1";
  double metrics_wait_s = 5;
  std::string metrics_config;
  std::string metrics_targets;
};

// The scrape interval of --metrics-config's prometheus.yml.
inline constexpr double kMetricsScrapeIntervalS = 1;

// The pool file of `node` of cluster `cluster`: /dev/shm/dualpath-<cluster>-<node>.pool.
std::string NodePoolPath(const std::string& cluster, const std::string& node);

struct ClusterRunReport {
  std::string config_json;
  std::vector<SystemRun> runs;
};

// "basic", "dualpath", "oracle" or "all" (comma-separated lists too) → systems, in that order
// (sched::ParseSystemList over sched::kServiceSystems; errors name --system).
Result<std::vector<std::string>> ParseSystems(const std::string& spec);

// Progress lines go to `progress` (one line per step). Errors: bad options (kInvalidArgument),
// testbed errors, a child that died or did not start (kUnavailable naming it and its log tail),
// kTimeout.
Result<ClusterRunReport> RunOnCluster(const ClusterRunOptions& options, std::ostream& progress);

}  // namespace dualpath::replay
