#include "dualpath/replay/cluster_run.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "child.h"
#include "cluster_metrics.h"
#include "dualpath/common/log.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/control/client.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/pool/pool.h"
#include "dualpath/replay/rack_pool.h"
#include "dualpath/sched/routing.h"
#include "dualpath/sched/system.h"
#include "dualpath/testbed/testbed.h"
#include "fault_injector.h"
#include "link_monitor.h"
#include "run_credentials.h"
#include "run_lock.h"
#include "run_store.h"
#include "system_check.h"

namespace dualpath::replay {
namespace {

using nlohmann::json;

// Tears the cluster down when the run ends, on every path, if this run brought it up.
class ClusterGuard {
 public:
  ClusterGuard(std::string name, bool active, std::ostream& progress)
      : name_(std::move(name)), active_(active), progress_(progress) {}
  ClusterGuard(const ClusterGuard&) = delete;
  ClusterGuard& operator=(const ClusterGuard&) = delete;
  ~ClusterGuard() {
    if (!active_) return;
    progress_ << "cluster " << name_ << ": down\n" << std::flush;
    if (Status s = testbed::ClusterDown(name_); !s.ok()) {
      log::Error("cluster run: cluster down {}: {}", name_, s.ToString());
    }
  }

 private:
  std::string name_;
  bool active_;
  std::ostream& progress_;
};

std::string SelfExe() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "dualpath" : p.string();
}

// $DUALPATH_REPLAY_ROOT, else /var/tmp/dualpath-replay.
std::string ReplayRoot() {
  const char* env = std::getenv("DUALPATH_REPLAY_ROOT");
  return env != nullptr && *env != '\0' ? env : "/var/tmp/dualpath-replay";
}

// A unique id for this run: store subdirectories and the work directory are named after it.
std::string RunId() {
  const Nanos now = WallClock().Now();
  return std::to_string(now / kNanosPerSecond) + "-" + std::to_string(getpid());
}

std::string ConfigJson(const ClusterRunOptions& o, const testbed::Cluster& c,
                       const ReplayWorkload& w, const std::vector<double>& goodput,
                       const std::string& model_spec) {
  json j;
  j["tool"] = "dualpath cluster run";
  j["cluster"] = {{"name", c.name},
                  {"pd", c.PdSpec()},
                  {"storage_rate_bps", c.storage_rate_bps},
                  {"compute_rate_bps", c.compute_rate_bps}};
  j["workload"] = {{"source", o.workload.source},
                   {"agents", o.workload.agents},
                   {"turns", o.workload.turns},
                   {"append", o.workload.append},
                   {"gen", o.workload.gen},
                   {"max_context", o.workload.max_context},
                   {"seed", o.workload.seed},
                   {"requests", w.requests},
                   {"prompt_tokens", w.prompt_tokens},
                   {"context_tokens", w.context_tokens},
                   {"gen_tokens", w.gen_tokens},
                   {"shared_prefix_tokens", w.shared_prefix_tokens}};
  j["model_spec"] = model_spec;
  j["block_tokens"] = o.block_tokens;
  j["online"] = o.replay.online;
  j["aps"] = o.replay.online ? json(o.replay.aps) : json(nullptr);
  j["goodput_mode"] = o.goodput;
  j["goodput_bps"] = goodput;
  j["systems"] = o.systems;
  j["routing"] = o.routing;
  j["kv_substrate"] = o.kv_substrate;
  j["engine_args"] = o.engine_args;  // e.g. batching modes, --result-after-write
  return j.dump();
}

// Registered engines that the service considers alive (the orchestrator's own calls go through
// the same scheduler client as the replayer's and the engines').
Result<int> AliveEngines(control::Client& scheduler) {
  ASSIGN_OR_RETURN(control::v1::ListEnginesReply reply, scheduler.ListEngines());
  int alive = 0;
  for (int i = 0; i < reply.engines_size(); ++i) {
    alive += i >= reply.alive_size() || reply.alive(i) ? 1 : 0;
  }
  return alive;
}

// --fault rack-manager: the run's own non-coherent rack pool loses its lock manager.
bool KillsRackManager(const ClusterRunOptions& o) {
  return o.fault && o.fault->kind == FaultKind::kRackManager;
}

// Names a child that died: what it was, how it ended, the end of its log.
Status ChildDied(const std::string& what, Child& c) {
  const std::optional<int> st = c.Poll();
  return Unavailable(what + " exited (" + (st ? DescribeWaitStatus(*st) : "still running") +
                     "); log " + c.log_path() + ":\n" + c.LogTail(1500));
}

// One line for a child that ended while the run still needed it (the replay's health check).
Status ChildGone(const std::string& what, Child& c) {
  const std::optional<int> st = c.Poll();
  return Unavailable(what + " exited during the run (" +
                     (st ? DescribeWaitStatus(*st) : "still running") + "); log " + c.log_path());
}

// The node pools of one run: stale files of an interrupted run removed up front, this run's removed
// on every path (the engines are gone by then: StopSystem reaped them).
class NodePools {
 public:
  NodePools(const testbed::Cluster& c, bool active) {
    if (!active) return;
    for (const testbed::Node& n : c.nodes) paths_.push_back(NodePoolPath(c.name, n.name));
    Remove("stale ");
  }
  NodePools(const NodePools&) = delete;
  NodePools& operator=(const NodePools&) = delete;
  ~NodePools() { Remove(""); }

 private:
  void Remove(const char* what) {
    for (const std::string& p : paths_) {
      std::error_code ec;
      if (!std::filesystem::exists(p, ec)) continue;
      // Destroy checks that it is a pool region before removing it.
      if (Status s = pool::Pool::Destroy(p); !s.ok()) {
        log::Warn("cluster run: remove {}pool {}: {}", what, p, s.ToString());
      }
    }
  }
  std::vector<std::string> paths_;
};

// Attaches to a node pool without a background thread, for one look.
Result<std::unique_ptr<pool::Pool>> AttachForInspection(const std::string& path) {
  pool::OpenOptions po;
  po.background_thread = false;
  return pool::Pool::Open(path, po);
}

// Before a system starts on a rack pool with the prefix cache: evicts every unpinned block, so the
// system starts as cold as its fresh store directory (an earlier system's, or an earlier run's,
// blocks would be hits it never wrote). Blocks are content-keyed, so leaving them would be correct,
// only not a fair comparison.
Status DropRackBlocks(const std::string& path, std::ostream& progress) {
  pool::OpenOptions po;
  po.background_thread = false;
  po.lock_manager = false;  // the rack's `pool serve` holds the role (non-coherent)
  ASSIGN_OR_RETURN(std::unique_ptr<pool::Pool> p, pool::Pool::Open(path, po));
  ASSIGN_OR_RETURN(size_t n, p->Evict(p->geometry().index_capacity));
  if (n > 0) progress << "rack pool: evicted " << n << " cached blocks of an earlier system\n";
  return Status::Ok();
}

// Records the root of the engine about to be killed while it runs.
Result<BufferReclaim> InspectBuffers(const std::string& path, const std::string& engine) {
  ASSIGN_OR_RETURN(std::unique_ptr<pool::Pool> p, AttachForInspection(path));
  BufferReclaim b;
  b.pool = path;
  b.root = pool::EngineRootName(engine);
  const pool::PoolStats s = p->Stats();
  if (!s.lock_error.empty()) return Status(Code::kTimeout, s.lock_error);
  for (const pool::RootInfo& r : s.root_list) {
    if (r.name == b.root) {
      b.root_bytes = r.bytes;
      b.owner_pid = r.owner_pid;
    }
  }
  b.reclaimed_roots = s.reclaimed_roots;  // baseline for the count after the kill
  return b;
}

// After the kill (the engine reaped): run the pool's recovery sweep and look again.
Status CheckReclaimed(BufferReclaim& b) {
  ASSIGN_OR_RETURN(std::unique_ptr<pool::Pool> p, AttachForInspection(b.pool));
  RETURN_IF_ERROR(p->Recover());
  const pool::PoolStats s = p->Stats();
  if (!s.lock_error.empty()) return Status(Code::kTimeout, s.lock_error);
  b.root_after = false;
  for (const pool::RootInfo& r : s.root_list) b.root_after |= r.name == b.root;
  b.used_bytes_after = s.used_bytes;
  b.total_pins_after = s.total_pins;
  b.reclaimed_roots = s.reclaimed_roots - b.reclaimed_roots;
  return Status::Ok();
}

struct SystemProcesses {
  std::optional<Child> service;
  std::vector<Child> engines;  // cluster node order
};

// What every system's run shares, fixed once the cluster is up (RunOnCluster builds it).
struct RunShared {
  const ClusterRunOptions& o;
  const testbed::Cluster& cluster;
  const ReplayWorkload& workload;
  std::string bin;     // the dualpath executable the children run
  std::string run_id;  // names the store subdirectories
  std::string work;    // logs
  std::string spec;    // the model spec
  std::vector<double> goodput;
  std::vector<std::string> names, roles;      // per node, cluster order
  int kill_index = -1;                        // the --fault engine:NODE node, or -1
  const MetricsEndpoints* metrics = nullptr;  // --metrics, else null
  std::unique_ptr<RunCredentials> auth;       // engines' mTLS certificates and transfer token
  std::string rack_path;         // --kv-substrate rack-pool: the rack region, else empty
  RackPool* own_rack = nullptr;  // a rack pool this run started (--fault rack-manager needs it)
};

// One system's run: its name, its store subdirectory and the service's address.
struct SystemSetup {
  const RunShared& run;
  std::string system;
  std::string subdir;
  std::string address;
  RunStore* kv_store = nullptr;  // --store: this system's store, else null
};

// The store subdirectory of node `n`: the system's own, or with --local-tiers one per node.
std::string NodeSubdir(const SystemSetup& s, const testbed::Node& n) {
  return s.run.o.local_tiers ? s.subdir + "-" + n.name : s.subdir;
}

// Every store subdirectory of the system (one, or one per node with --local-tiers).
std::vector<std::string> SystemSubdirs(const SystemSetup& s) {
  if (!s.run.o.local_tiers) return {s.subdir};
  std::vector<std::string> out;
  for (const testbed::Node& n : s.run.cluster.nodes) out.push_back(NodeSubdir(s, n));
  return out;
}

// Where engine `node` writes its store link's counters (--store).
std::string KvStoreStatsPath(const SystemSetup& s, const std::string& node) {
  return s.run.work + "/" + s.system + "_kvstore_" + node + ".json";
}

// Where engine `node` writes its KV substrate counters (--kv-stats).
std::string KvStatsPath(const SystemSetup& s, const std::string& node) {
  return s.run.work + "/" + s.system + "_kvstats_" + node + ".json";
}

// The engines' KV substrate counters as one JSON object (sums and the per-engine objects; files
// that are missing or unreadable are left out, with a warning), and one line to progress: the KV
// payload bytes the engines put over the compute links and moved through the rack pool.
std::string KvSubstrateReport(const SystemSetup& s, const std::string& rack_manager_killed,
                              uint64_t compute_link_bytes, std::ostream& progress) {
  json engines = json::array();
  uint64_t compute = 0, written = 0, read = 0, errors = 0;
  // The rack prefix cache and the storage reads it saves (summed over the engines).
  uint64_t hits = 0, misses = 0, corrupt = 0, hit_bytes = 0, published = 0, storage_read = 0;
  for (const testbed::Node& n : s.run.cluster.nodes) {
    std::ifstream in(KvStatsPath(s, n.name));
    json e = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (e.is_discarded() || !e.is_object()) {
      log::Warn("cluster run: no KV stats from engine {} ({})", n.name, KvStatsPath(s, n.name));
      continue;
    }
    compute += e.value("compute_link_kv_bytes", uint64_t{0});
    written += e.value("rack_pool_written_bytes", uint64_t{0});
    read += e.value("rack_pool_read_bytes", uint64_t{0});
    errors += e.value("rack_pool_errors", uint64_t{0});
    hits += e.value("rack_prefix_hits", uint64_t{0});
    misses += e.value("rack_prefix_misses", uint64_t{0});
    corrupt += e.value("rack_prefix_corrupt", uint64_t{0});
    hit_bytes += e.value("rack_prefix_bytes", uint64_t{0});
    published += e.value("rack_prefix_published", uint64_t{0});
    storage_read += e.value("storage_read_bytes", uint64_t{0});
    engines.push_back(std::move(e));
  }
  if (engines.empty()) return "";
  progress << s.system << ": KV substrate " << s.run.o.kv_substrate << ": " << compute
           << " KV payload bytes over the compute links, " << written << " written to / " << read
           << " read from the rack pool (" << errors << " errors); " << compute_link_bytes
           << " bytes sent on the compute links in all\n";
  const bool cache = !s.run.rack_path.empty() && s.run.o.rack_prefix_cache == "on";
  progress << s.system << ": rack prefix cache " << (cache ? "on" : "off") << ": " << hits
           << " hit blocks (" << hit_bytes << " bytes), " << misses << " misses, " << corrupt
           << " corrupt, " << published << " published; " << storage_read
           << " block bytes read from storage by the engines\n"
           << std::flush;
  return json{{"kv_substrate", s.run.o.kv_substrate},
              {"compute_link_kv_bytes", compute},
              {"compute_link_bytes", compute_link_bytes},
              {"rack_pool_written_bytes", written},
              {"rack_pool_read_bytes", read},
              {"rack_pool_errors", errors},
              {"rack_prefix_cache", cache},
              {"rack_prefix_hits", hits},
              {"rack_prefix_misses", misses},
              {"rack_prefix_corrupt", corrupt},
              {"rack_prefix_bytes", hit_bytes},
              {"rack_prefix_published", published},
              {"storage_read_bytes", storage_read},
              {"rack_pool", s.run.rack_path.empty() ? json(nullptr) : json(s.run.rack_path)},
              {"rack_manager_killed",
               rack_manager_killed.empty() ? json(nullptr) : json(rack_manager_killed)},
              {"engines", std::move(engines)}}
      .dump();
}

// Where prefill engine `node` writes its forward batch stats (--batch-stats).
std::string BatchStatsPath(const SystemSetup& s, const std::string& node) {
  return s.run.work + "/" + s.system + "_batches_" + node + ".json";
}

// The prefill engines' batch stats as one JSON array (files that are missing or unreadable are
// left out, with a warning), and a line per engine to progress: forward batches, mean requests
// per batch, and the attention max/avg across its ranks.
std::string PrefillBatchReport(const SystemSetup& s, std::ostream& progress) {
  json all = json::array();
  for (const testbed::Node& n : s.run.cluster.nodes) {
    if (n.role != testbed::Role::kPrefill) continue;
    std::ifstream in(BatchStatsPath(s, n.name));
    json e = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (e.is_discarded() || !e.is_object()) {
      log::Warn("cluster run: no batch stats from engine {} ({})", n.name,
                BatchStatsPath(s, n.name));
      continue;
    }
    progress << s.system << ": " << n.name << ": " << e.value("batches", 0) << " forward batches, "
             << e.value("mean_requests", 0.0) << " requests per batch (max "
             << e.value("max_requests", 0) << "), " << e.value("ranks", 0) << " ranks";
    const json& b = e["attention_max_avg"];
    if (b.is_object() && b["mean"].is_number()) {
      progress << ", attention max/avg per batch mean " << b["mean"].get<double>() << " p50 "
               << b["p50"].get<double>() << ", weighted " << b["weighted"].get<double>();
    }
    progress << "\n";
    all.push_back(std::move(e));
  }
  progress << std::flush;
  return all.empty() ? "" : all.dump();
}

// `dualpath control serve` for one system.
std::vector<std::string> ServeArgv(const SystemSetup& s) {
  const ClusterRunOptions& o = s.run.o;
  std::vector<std::string> serve = {s.run.bin,
                                    "control",
                                    "serve",
                                    "--listen",
                                    s.address,
                                    "--system",
                                    s.system,
                                    "--model-spec",
                                    s.run.spec,
                                    "--block-tokens",
                                    std::to_string(o.block_tokens),
                                    "--store-root",
                                    s.run.cluster.storage.admin_mount,
                                    "--store-subdir",
                                    s.subdir,
                                    "--heartbeat-s",
                                    std::to_string(o.heartbeat_s)};
  if (o.local_tiers) {
    std::string all;
    for (const std::string& d : SystemSubdirs(s)) all += (all.empty() ? "" : ",") + d;
    serve[std::find(serve.begin(), serve.end(), "--store-subdir") - serve.begin() + 1] = all;
  }
  if (s.kv_store != nullptr) {
    serve.insert(serve.end(),
                 {"--kv-store-etcd", s.kv_store->etcd(), "--kv-store-cluster", s.kv_store->name()});
    // The hit probe's client certificate towards the store's etcd and masters (the service's
    // own listener is a unix socket: it has no --tls-* to default to).
    for (std::string& a : s.run.auth->TlsArgs(RunCredentials::kClient, "kv-store-")) {
      serve.push_back(std::move(a));
    }
    // Inside the first node's namespace: etcd and the masters are on the compute network.
    serve.insert(serve.begin(), {"ip", "netns", "exec", s.run.cluster.nodes[0].netns});
  }
  if (o.routing != "dualpath") {  // the default: the service's argv stays as before
    serve.push_back("--routing");
    serve.push_back(o.routing);
  }
  // The service learns the engine set up front (NAME:ROLE:NODE), so it can tell a missing
  // engine from one that has not registered yet.
  std::string engines;
  for (const testbed::Node& n : s.run.cluster.nodes) {
    engines += (engines.empty() ? "" : ",") + n.name +
               ".0:" + std::string(testbed::RoleName(n.role)) + ":" + n.name;
  }
  serve.push_back("--engines");
  serve.push_back(engines);
  for (std::string& a :
       MetricsEndpoints::ArgsOf(s.run.metrics, MetricsEndpoints::kServiceSlot, o.metrics_wait_s)) {
    serve.push_back(std::move(a));
  }
  serve.insert(serve.end(), o.service_args.begin(), o.service_args.end());
  return serve;
}

// `dualpath engine` for node `n` (index i), inside its namespace.
std::vector<std::string> EngineArgv(const SystemSetup& s, const testbed::Node& n, size_t i) {
  const ClusterRunOptions& o = s.run.o;
  std::vector<std::string> argv = {
      "ip",           "netns",       "exec",           n.netns,
      s.run.bin,      "engine",      "--role",         std::string(testbed::RoleName(n.role)),
      "--name",       n.name + ".0", "--node",         n.name,
      "--scheduler",  s.address,     "--listen",       n.compute_addr,
      "--store-root", n.mount,       "--store-subdir", NodeSubdir(s, n)};
  if (s.kv_store != nullptr) {
    argv.insert(argv.end(), {"--kv-store-etcd", s.kv_store->etcd(), "--kv-store-cluster",
                             s.kv_store->name(), "--kv-store-stats", KvStoreStatsPath(s, n.name)});
    // Towards the store's etcd and masters the engine uses its --tls-* (its node's certificate).
    // No --kv-store-node: puts go to the node with the most free DRAM, so the cluster's DRAM
    // fills evenly (a preferred writer's node would evict at its high watermark before a put
    // spills elsewhere, and only decode engines write). Same-node reads still go through shm.
  }
  if (n.role == testbed::Role::kPrefill) {
    argv.push_back("--batch-stats");
    argv.push_back(BatchStatsPath(s, n.name));
  }
  if (o.pool) {
    argv.push_back("--pool");
    argv.push_back(NodePoolPath(s.run.cluster.name, n.name));
  }
  argv.insert(argv.end(), {"--kv-stats", KvStatsPath(s, n.name)});
  if (!s.run.rack_path.empty()) {
    // Rack node i is cluster node i (replay/rack_pool.h).
    argv.insert(argv.end(),
                {"--kv-substrate", "rack-pool", "--rack-pool", s.run.rack_path, "--rack-node",
                 std::to_string(i), "--rack-prefix-cache", o.rack_prefix_cache});
  }
  for (std::string& a :
       MetricsEndpoints::ArgsOf(s.run.metrics, MetricsEndpoints::NodeSlot(i), o.metrics_wait_s)) {
    argv.push_back(std::move(a));
  }
  const std::vector<std::string> auth = s.run.auth->EngineArgs(n.name);
  argv.insert(argv.end(), auth.begin(), auth.end());
  argv.insert(argv.end(), o.engine_args.begin(), o.engine_args.end());
  return argv;
}

// Until the service's socket accepts (by `deadline`); a dead service fails fast instead.
Status WaitForService(const SystemSetup& s, Nanos deadline, SystemProcesses& procs,
                      control::Client& scheduler) {
  while (!scheduler.WaitForConnected(200 * kNanosPerMilli).ok()) {
    RETURN_IF_ERROR(CheckStop());
    if (!procs.service->running() || procs.service->Poll().has_value()) {
      return ChildDied("control serve (" + s.system + ")", *procs.service);
    }
    if (WallClock().Now() > deadline) {
      return Timeout("control serve (" + s.system + ") not reachable at " + s.address + " after " +
                     std::to_string(s.run.o.start_timeout_s) + " s; log " +
                     procs.service->log_path());
    }
  }
  return Status::Ok();
}

// Until every engine is registered and alive (by `deadline`); a dead engine or service fails fast.
Status WaitForEngines(const SystemSetup& s, Nanos deadline, SystemProcesses& procs,
                      control::Client& scheduler) {
  const testbed::Cluster& c = s.run.cluster;
  const int want = static_cast<int>(c.nodes.size());
  int alive = 0;
  while (true) {
    RETURN_IF_ERROR(CheckStop());
    for (size_t i = 0; i < procs.engines.size(); ++i) {
      if (procs.engines[i].Poll().has_value()) {
        return ChildDied("engine " + c.nodes[i].name + " (" + s.system + ")", procs.engines[i]);
      }
    }
    if (procs.service->Poll().has_value()) {
      return ChildDied("control serve (" + s.system + ")", *procs.service);
    }
    Result<int> n = AliveEngines(scheduler);
    if (n.ok() && *n >= want) return Status::Ok();
    alive = n.ok() ? *n : alive;
    if (WallClock().Now() > deadline) {
      return Timeout(std::to_string(alive) + " of " + std::to_string(want) +
                     " engines registered after " + std::to_string(s.run.o.start_timeout_s) +
                     " s; logs in " + s.run.work);
    }
    // Registration is a handful of RPCs; a dead engine is caught above on the next round. The
    // service offers no "wait for engines" call, so poll its list, bounded by the deadline.
    (void)procs.service->Wait(100 * kNanosPerMilli);
  }
}

// Starts the service and every engine and waits until all engines are registered.
Status StartSystem(const SystemSetup& s, SystemProcesses& procs, control::Client& scheduler,
                   std::ostream& progress) {
  const std::string& work = s.run.work;
  ASSIGN_OR_RETURN(Child service, Child::Spawn(ServeArgv(s), work + "/" + s.system + "_service.log",
                                               MetricsEndpoints::FdsOf(
                                                   s.run.metrics, MetricsEndpoints::kServiceSlot)));
  procs.service.emplace(std::move(service));
  const Nanos deadline = WallClock().Now() + FromSeconds(s.run.o.start_timeout_s);
  RETURN_IF_ERROR(WaitForService(s, deadline, procs, scheduler));
  for (size_t i = 0; i < s.run.cluster.nodes.size(); ++i) {
    const testbed::Node& n = s.run.cluster.nodes[i];
    ASSIGN_OR_RETURN(
        Child e,
        Child::Spawn(EngineArgv(s, n, i), work + "/" + s.system + "_engine_" + n.name + ".log",
                     MetricsEndpoints::FdsOf(s.run.metrics, MetricsEndpoints::NodeSlot(i))));
    procs.engines.push_back(std::move(e));
  }
  RETURN_IF_ERROR(WaitForEngines(s, deadline, procs, scheduler));
  progress << s.system << ": service and " << s.run.cluster.nodes.size() << " engines up\n"
           << std::flush;
  return Status::Ok();
}

// Shutdown, then every engine and the service exit (killed after stop_timeout_s).
Status StopSystem(const ClusterRunOptions& o, const testbed::Cluster& c, const std::string& system,
                  SystemProcesses& procs, control::Client& scheduler) {
  Status status = scheduler.Shutdown();
  const Nanos deadline = WallClock().Now() + FromSeconds(o.stop_timeout_s);
  for (size_t i = 0; i < procs.engines.size(); ++i) {
    const Nanos left = std::max<Nanos>(0, deadline - WallClock().Now());
    Result<int> w = procs.engines[i].Wait(left);
    if (!w.ok()) {
      log::Warn("cluster run: engine {} ({}) did not exit after Shutdown; killing it",
                c.nodes[i].name, system);
      procs.engines[i].Stop(kNanosPerSecond);
    } else if (*w != 0) {
      log::Warn("cluster run: engine {} ({}) ended with {}; log {}", c.nodes[i].name, system,
                DescribeWaitStatus(*w), procs.engines[i].log_path());
    }
  }
  if (procs.service) {
    // The service has nothing left to do once the engines are gone: TERM is its normal stop.
    // With metrics, it first waits (bounded) for its last scrape.
    Result<int> w = procs.service->Wait(FromSeconds(2 + (o.metrics ? o.metrics_wait_s : 0)));
    if (!w.ok()) procs.service->Stop(5 * kNanosPerSecond);
    // The service exits as soon as every live engine saw the shutdown, which can be before this
    // client has read Shutdown's reply: the connection then closes under the call ("Broken pipe",
    // "Socket closed"). An exit status of 0 without a signal means it took the shutdown and the
    // run finished (`control serve` exits 0 only then), so the lost reply is no failure.
    if (status.code() == Code::kUnavailable && w.ok() && *w == 0) {
      log::Info(
          "cluster run: {} service finished and exited 0 before Shutdown's reply arrived ({})",
          system, status.message());
      status = Status::Ok();
    }
  }
  return status;
}

// The replay of one system, with its health check: it ends early, with a one-line reason, when
// the run cannot go on: a stop signal, the cluster taken down under it, or the service or an
// engine gone (the victim of `--fault engine:NODE`, once killed, excepted).
Result<ReplayResult> ReplaySystem(const SystemSetup& s, SystemProcesses& procs,
                                  LinkSampler& sampler, FaultInjector* fault) {
  const RunShared& r = s.run;
  ReplayOptions ro = r.o.replay;
  ro.first_request_id = 1;
  if (fault != nullptr) ro.on_result = [fault](const RequestRecord&) { fault->OnResult(); };
  ro.health = [&]() -> Status {
    RETURN_IF_ERROR(CheckStop());
    RETURN_IF_ERROR(sampler.Health());
    if (fault != nullptr) RETURN_IF_ERROR(fault->Tick(WallClock().Now()));
    if (s.kv_store != nullptr) RETURN_IF_ERROR(s.kv_store->Health());
    const bool service_down = fault != nullptr && fault->ServiceDown();
    if (!service_down && procs.service->Poll().has_value()) {
      return ChildGone("control serve (" + s.system + ")", *procs.service);
    }
    // The victim of `--fault engine:NODE` once it was killed; before that its exit is a failure.
    const int killed = fault != nullptr && fault->outcome().injected ? r.kill_index : -1;
    for (size_t i = 0; i < procs.engines.size(); ++i) {
      if (static_cast<int>(i) != killed && procs.engines[i].Poll().has_value()) {
        return ChildGone("engine " + r.cluster.nodes[i].name + " (" + s.system + ")",
                         procs.engines[i]);
      }
    }
    return Status::Ok();
  };
  std::unique_ptr<ServiceClient> client = MakeGrpcServiceClient(s.address);
  return RunReplay(r.workload, ro, *client, WallClock());
}

// After the kill: reaps the victim (its pid must be gone), sweeps its node's pool and says whether
// its buffers were reclaimed.
Status SweepKilledPool(const SystemSetup& s, SystemProcesses& procs, BufferReclaim& buffers,
                       std::ostream& progress) {
  const std::string& node = s.run.names[static_cast<size_t>(s.run.kill_index)];
  Child& victim = procs.engines[static_cast<size_t>(s.run.kill_index)];
  if (!victim.Wait(10 * kNanosPerSecond).ok()) {
    return Timeout("killed engine " + node + " did not exit within 10 s");
  }
  RETURN_IF_ERROR(CheckReclaimed(buffers).WithContext("sweep pool " + buffers.pool));
  progress << s.system << ": " << node << "'s buffers "
           << (buffers.reclaimed() ? "reclaimed" : "NOT reclaimed") << ": root " << buffers.root
           << " (" << (buffers.root_bytes >> 20) << " MiB, pid " << buffers.owner_pid << ") "
           << (buffers.root_after ? "still present" : "gone") << ", " << buffers.reclaimed_roots
           << " root(s) reclaimed, pool " << buffers.pool << " now " << buffers.used_bytes_after
           << " bytes used, " << buffers.total_pins_after << " pins\n"
           << std::flush;
  return Status::Ok();
}

// The --fault injector of one system's run (null without --fault). Killing and restarting the
// service happen on the replay's thread (the injector's hooks), which owns procs.service then.
std::unique_ptr<FaultInjector> MakeFaultInjector(const SystemSetup& s, SystemProcesses& procs,
                                                 control::Client& scheduler) {
  if (!s.run.o.fault) return nullptr;
  FaultInjector::ServiceHooks hooks;
  hooks.kill = [&procs]() -> Status {
    procs.service->Signal(SIGKILL);
    return procs.service->Wait(10 * kNanosPerSecond).status();
  };
  hooks.start = [&s, &procs]() -> Status {
    ASSIGN_OR_RETURN(Child again,
                     Child::Spawn(ServeArgv(s), s.run.work + "/" + s.system + "_service.log"));
    *procs.service = std::move(again);
    return Status::Ok();
  };
  hooks.engine_reachable = [&scheduler](const std::string& node) -> Result<bool> {
    ASSIGN_OR_RETURN(control::v1::ListEnginesReply l, scheduler.ListEngines());
    for (int i = 0; i < l.engines_size(); ++i) {
      if (l.engines(i).node() != node) continue;
      const bool alive = i >= l.alive_size() || l.alive(i);
      // A service without the field (before issue 25) judges by fetches only.
      const bool reachable = i >= l.reachable_size() || l.reachable(i);
      return alive && reachable;
    }
    return NotFound("no engine of node " + node + " registered");
  };
  if (RackPool* rack = s.run.own_rack; rack != nullptr) {
    hooks.kill_rack_manager = [rack] { return rack->KillManager(); };
  }
  if (const int victim = s.run.kill_index; victim >= 0) {
    // Its whole process group, SIGKILL: no clean shutdown. Reaped after the replay
    // (SweepKilledPool, StopSystem); the health check does not count it gone.
    hooks.kill_engine = [&procs, victim](const std::string&) -> Status {
      procs.engines[static_cast<size_t>(victim)].Signal(SIGKILL);
      return Status::Ok();
    };
  }
  return std::make_unique<FaultInjector>(
      *s.run.o.fault, s.run.cluster, s.run.work + "/" + s.system + "_fault.log", hooks, s.kv_store);
}

// --store: the leader's Stats (each node's DRAM used) and the engines' store counters, summed,
// as one JSON object for the run's results; a line of it goes to progress.
std::string KvStoreReport(const SystemSetup& s, RunStore& kv_store, std::ostream& progress) {
  json j;
  j["cluster"] = kv_store.name();
  j["dram_mib_per_node"] = s.run.o.store_dram_mib;
  Result<std::string> master = kv_store.StatsJson();
  if (master.ok()) {
    json m = json::parse(*master, nullptr, /*allow_exceptions=*/false);
    j["master"] = m.is_discarded() ? json(nullptr) : std::move(m);
  } else {
    j["master"] = nullptr;
    log::Warn("cluster run: store stats: {}", master.status().ToString());
  }
  static constexpr const char* kKeys[] = {"hits_local", "hits_remote", "misses",      "rejected",
                                          "puts_ok",    "puts_failed", "puts_pending"};
  static constexpr int kNumKeys = static_cast<int>(std::size(kKeys));
  uint64_t sums[kNumKeys] = {};
  j["engines"] = json::array();
  for (const testbed::Node& n : s.run.cluster.nodes) {
    std::ifstream in(KvStoreStatsPath(s, n.name));
    json e = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (e.is_discarded() || !e.is_object()) {
      log::Warn("cluster run: no store counters from engine {} ({})", n.name,
                KvStoreStatsPath(s, n.name));
      continue;
    }
    for (int k = 0; k < kNumKeys; ++k) sums[k] += e.value(kKeys[k], uint64_t{0});
    j["engines"].push_back(std::move(e));
  }
  for (int k = 0; k < kNumKeys; ++k) j[kKeys[k]] = sums[k];
  progress << s.system << ": store: blocks read local " << sums[0] << ", remote " << sums[1]
           << ", missed " << sums[2] << ", rejected " << sums[3] << "; puts " << sums[4] << " ok, "
           << sums[5] << " failed, " << sums[6]
           << " pending (another engine's put); DRAM used per node:";
  const json& m = j["master"];
  if (m.is_object() && m.contains("usage")) {
    for (const json& u : m["usage"]) {
      const uint64_t id = u.value("node", uint64_t{0});
      const std::string name = id >= 1 && id <= s.run.cluster.nodes.size()
                                   ? s.run.cluster.nodes[id - 1].name
                                   : std::to_string(id);
      progress << " " << name << " " << (u.value("dram_used", uint64_t{0}) >> 20) << "/"
               << (u.value("dram_capacity", uint64_t{0}) >> 20) << " MiB";
    }
  } else {
    progress << " unknown";
  }
  progress << "\n" << std::flush;
  return j.dump();
}

// --store / --local-tiers: hit tokens loaded against the ideal (every token carried over from the
// agent's previous turns), and each node's storage-link bytes.
void PrintPrefixHits(const SystemSetup& s, const SystemRun& run, std::ostream& progress) {
  int64_t loaded = 0, assigned = 0;
  for (const RequestRecord& rec : run.replay.records) {
    if (!rec.result.ok()) continue;
    loaded += rec.result.loaded_tokens();
    assigned += rec.result.hit_tokens();
  }
  const uint64_t ideal = s.run.workload.context_tokens;
  progress << s.system << ": prefix hits: " << loaded << " tokens loaded (" << assigned
           << " assigned) of " << ideal << " ideal = "
           << (ideal > 0 ? 100.0 * static_cast<double>(loaded) / static_cast<double>(ideal) : 0)
           << "%; storage-link bytes:";
  for (const LinkUsage& l : run.links) progress << " " << l.node << " " << l.rx_bytes;
  progress << "\n" << std::flush;
}

// One system from start to stop: the service and engines up, the replay (with the fault, if
// any), link counters around it, everything stopped again.
Result<SystemRun> RunSystem(const SystemSetup& setup, std::ostream& progress) {
  const RunShared& r = setup.run;
  const ClusterRunOptions& o = r.o;
  // --store: the system's own store, up before the service and the engines and down after them
  // (declared before procs: destroyed after them on every path).
  std::unique_ptr<RunStore> kv_store;
  if (o.store) {
    RunStoreConfig sc;
    sc.bin = r.bin;
    sc.name = r.cluster.name + "." + setup.system;
    sc.work = r.work;
    sc.data_dir = r.cluster.state_dir + "/" + setup.subdir + "-etcd";
    sc.auth = r.auth.get();
    sc.dram_mib = o.store_dram_mib;
    sc.ttl_s = o.store_ttl_s;
    sc.start_timeout_s = o.start_timeout_s;
    ASSIGN_OR_RETURN(kv_store, RunStore::Start(r.cluster, sc, progress));
  }
  SystemSetup s = setup;
  s.kv_store = kv_store.get();
  SystemProcesses procs;
  control::Client scheduler(s.address);
  if (!r.rack_path.empty() && o.rack_prefix_cache == "on") {
    RETURN_IF_ERROR(DropRackBlocks(r.rack_path, progress).WithContext("rack pool " + r.rack_path));
  }
  RETURN_IF_ERROR(StartSystem(s, procs, scheduler, progress));
  ASSIGN_OR_RETURN(LinkSample before, ReadStorageCounters(r.cluster));
  ASSIGN_OR_RETURN(LinkSample compute_before, ReadLinkCounters(r.cluster, testbed::Link::kCompute));
  LinkSampler sampler;
  sampler.Start(r.cluster, o.sample_interval_s);
  std::optional<BufferReclaim> buffers;
  if (r.kill_index >= 0 && o.pool) {
    // The victim's buffer root before the run, to check after the kill that the sweep took it.
    const std::string& victim = r.names[static_cast<size_t>(r.kill_index)];
    const std::string pool_path = NodePoolPath(r.cluster.name, victim);
    Result<BufferReclaim> b = InspectBuffers(pool_path, victim + ".0");
    if (!b.ok()) return b.status().WithContext("inspect pool " + pool_path);
    buffers = *b;
  }
  std::unique_ptr<FaultInjector> fault = MakeFaultInjector(s, procs, scheduler);
  Result<ReplayResult> replay = ReplaySystem(s, procs, sampler, fault.get());
  if (replay.ok() && fault != nullptr) {
    Status done = fault->Finish(s.system, replay->records.size());
    if (!done.ok()) replay = done;
  }
  // --fault engine:NODE: the node whose engine the injector killed ("" when none was).
  const std::string killed_node =
      r.kill_index >= 0 && fault != nullptr ? fault->outcome().killed_node : std::string();
  const bool killed = !killed_node.empty();
  if (!replay.ok()) {
    // Stop what is left of this system (Shutdown, then TERM/KILL after stop_timeout_s) before
    // reporting; the cluster and pools go with their guards.
    sampler.Stop();
    (void)StopSystem(o, r.cluster, s.system, procs, scheduler);
    if (const int sig = StopSignal(); sig != 0) {
      progress << s.system << ": stopped by " << StopSignalName(sig) << ": service and "
               << procs.engines.size() << " engines stopped\n"
               << std::flush;
    }
    return replay.status().WithContext(s.system + " replay (logs in " + r.work + ")");
  }
  if (killed) progress << s.system << ": killed engine " << killed_node << " mid-run\n";
  if (killed && buffers) RETURN_IF_ERROR(SweepKilledPool(s, procs, *buffers, progress));
  std::vector<LinkSample> samples = sampler.Stop();
  ASSIGN_OR_RETURN(LinkSample after, ReadStorageCounters(r.cluster));
  ASSIGN_OR_RETURN(LinkSample compute_after, ReadLinkCounters(r.cluster, testbed::Link::kCompute));
  // Everything the nodes sent on their compute links during the replay (KV, notices, EnginePeer
  // RPCs, probes): the link's view next to the engines' KV byte counters.
  uint64_t compute_link_bytes = 0;
  for (size_t i = 0; i < compute_after.tx.size() && i < compute_before.tx.size(); ++i) {
    compute_link_bytes += compute_after.tx[i] - compute_before.tx[i];
  }
  Status stopped = StopSystem(o, r.cluster, s.system, procs, scheduler);
  RETURN_IF_ERROR(stopped.WithContext(s.system));
  std::string kv_store_json;
  if (kv_store != nullptr) {
    // The engines are gone (their puts flushed, their counters written): the leader's view, then
    // the store goes.
    kv_store_json = KvStoreReport(s, *kv_store, progress);
    kv_store->Stop();
  }
  if (!o.keep) {
    std::error_code ec;
    for (const std::string& d : SystemSubdirs(s)) {
      std::filesystem::remove_all(r.cluster.storage.admin_mount + "/" + d, ec);
    }
  }
  // Write this system's dirty pages (the brick's KV files) back now, not while the next system
  // runs: the systems share the machine's CPUs and disk, and the kernel's writeback would
  // otherwise land on whichever system comes next.
  ::sync();
  SystemRun run;
  run.system = s.system;
  run.replay = std::move(*replay);
  run.links = ComputeLinkUsage(r.names, r.roles, before, after, samples, r.goodput,
                               run.replay.steady_start_ns, run.replay.steady_end_ns);
  run.samples = std::move(samples);
  if (fault != nullptr) run.fault = fault->outcome();
  if (fault != nullptr) MeasureRecovery(run.replay, *run.fault);
  if (run.fault) PrintFault(s.system, *run.fault, progress);
  if (killed) run.killed_engine = killed_node;
  if (killed) run.killed_buffers = buffers;
  run.kv_store_json = std::move(kv_store_json);
  run.prefill_batches_json = PrefillBatchReport(s, progress);  // the engines wrote theirs at exit
  run.kv_substrate_json =
      KvSubstrateReport(s, KillsRackManager(o) ? fault->outcome().killed_node : std::string(),
                        compute_link_bytes, progress);
  const Summary sum = Summarize(run.replay);
  progress << s.system << ": JCT " << sum.jct_s << " s, " << sum.requests << " requests, "
           << sum.failed << " failed\n"
           << std::flush;
  if (o.store || o.local_tiers) PrintPrefixHits(s, run, progress);
  return run;
}

// The cluster this run uses: the one that is up (its shape must match an explicit --pd), or a new
// one brought up with the options' shape and rates.
Result<testbed::Cluster> UseOrBringUpCluster(const ClusterRunOptions& o, bool was_up,
                                             std::ostream& progress) {
  testbed::Cluster cluster;
  if (was_up) {
    ASSIGN_OR_RETURN(cluster, testbed::LoadCluster(o.name));
    if (o.pd_given) {
      ASSIGN_OR_RETURN(auto counts, testbed::ParsePdSpec(o.pd));
      if (counts.first != cluster.prefill_nodes || counts.second != cluster.decode_nodes) {
        return InvalidArgument("cluster '" + o.name + "' is up as " + cluster.PdSpec() +
                               " but --pd " + o.pd + " was asked for; take it down first");
      }
    }
    progress << "cluster " << o.name << ": already up (" << cluster.PdSpec() << "), kept\n";
    return cluster;
  }
  testbed::ClusterOptions co;
  co.name = o.name;
  ASSIGN_OR_RETURN(auto counts, testbed::ParsePdSpec(o.pd));
  co.prefill_nodes = counts.first;
  co.decode_nodes = counts.second;
  co.storage_rate_bps = o.stor_rate_bps;
  co.compute_rate_bps = o.comp_rate_bps;
  testbed::UpReport up;
  ASSIGN_OR_RETURN(cluster, testbed::ClusterUp(co, &up));
  progress << "cluster " << o.name << ": up (" << cluster.PdSpec() << ") in " << up.seconds
           << " s\n";
  return cluster;
}

// The index in the cluster of the node whose engine `--fault engine:NODE` kills, -1 without one
// (the caller has refused a node the cluster lacks). Refused when that engine is the only one of
// its role: nothing could take its requests.
Result<int> KillIndex(const ClusterRunOptions& o, const testbed::Cluster& cluster) {
  if (!o.fault || o.fault->kind != FaultKind::kEngine) return -1;
  const testbed::Node* victim = cluster.FindNode(o.fault->node);
  if (victim == nullptr) return -1;
  size_t same_role = 0;
  for (const testbed::Node& n : cluster.nodes) same_role += n.role == victim->role ? 1 : 0;
  if (same_role < 2) {
    return InvalidArgument("--fault " + o.fault->ToString() + ": " + victim->name + " is " +
                           cluster.PdSpec() + "'s only " +
                           std::string(testbed::RoleName(victim->role)) +
                           " node; no engine could take its requests");
  }
  return static_cast<int>(victim - cluster.nodes.data());
}

}  // namespace

std::string NodePoolPath(const std::string& cluster, const std::string& node) {
  return "/dev/shm/dualpath-" + cluster + "-" + node + ".pool";
}

Result<std::vector<std::string>> ParseSystems(const std::string& spec) {
  Result<std::vector<sched::SystemKind>> kinds =
      sched::ParseSystemList(spec, sched::kServiceSystems);
  if (!kinds.ok()) return kinds.status().WithContext("--system");
  std::vector<std::string> out;
  for (sched::SystemKind k : *kinds) out.emplace_back(sched::SystemName(k));
  return out;
}

// docs/replay.md "Input ranges": the numbers that set a run's length and polling rates (the
// workload's own are checked by BuildWorkload, --pd and the rates by the testbed's parsers).
static Status ValidateRunRanges(const ClusterRunOptions& o) {
  if (o.replay.online) {
    RETURN_IF_ERROR(CheckRange("--aps", o.replay.aps, kMinRunAps, kMaxRunAps, "agents/s"));
  }
  RETURN_IF_ERROR(CheckRange("--timeout", o.replay.timeout_s, 1, kMaxRunTimeoutS, "s"));
  RETURN_IF_ERROR(
      CheckCountRange("--block-tokens", o.block_tokens, 1, kv::kMaxBlockSize, "tokens"));
  RETURN_IF_ERROR(CheckRange("--sample-interval", o.sample_interval_s, kMinSampleIntervalS,
                             kMaxSampleIntervalS, "s"));
  RETURN_IF_ERROR(
      CheckRange("--heartbeat-s", o.heartbeat_s, kMinRunHeartbeatS, kMaxRunHeartbeatS, "s"));
  RETURN_IF_ERROR(CheckRange("--metrics-wait-s", o.metrics_wait_s, 0, o.stop_timeout_s, "s"));
  RETURN_IF_ERROR(sched::ParseRouting(o.routing).status());
  RETURN_IF_ERROR(CheckRange("--store-ttl", o.store_ttl_s, kMinStoreTtlS, kMaxStoreTtlS, "s"));
  if (o.fault && FaultNeedsStore(o.fault->kind) && !o.store) {
    return InvalidArgument("--fault " + o.fault->ToString() +
                           ": the store fault kinds need --store (there is no store to fault)");
  }
  if (o.kv_substrate != "ucx" && o.kv_substrate != "rack-pool") {
    return InvalidArgument("--kv-substrate '" + o.kv_substrate + "': expected ucx or rack-pool");
  }
  if (o.kv_substrate == "rack-pool") {
    RETURN_IF_ERROR(pool::ParseMemoryModel(o.rack_pool_model).status().WithContext("--rack-pool"));
    RETURN_IF_ERROR(CheckCountRange("--rack-pool-size", o.rack_pool_bytes, kMinRackPoolBytes,
                                    kMaxRackPoolBytes, "bytes"));
  }
  if (o.rack_prefix_cache != "on" && o.rack_prefix_cache != "off") {
    return InvalidArgument("--rack-prefix-cache '" + o.rack_prefix_cache + "': expected on or off");
  }
  if (KillsRackManager(o) &&
      (o.kv_substrate != "rack-pool" || o.rack_pool_model != "noncoherent")) {
    return InvalidArgument("--fault " + o.fault->ToString() +
                           " needs --kv-substrate rack-pool --rack-pool noncoherent (the "
                           "coherent model has no lock manager)");
  }
  return Status::Ok();
}

Result<ClusterRunReport> RunOnCluster(const ClusterRunOptions& o, std::ostream& progress) {
  // Everything that can be rejected is checked before the cluster is touched.
  if (o.systems.empty()) return InvalidArgument("no systems to run");
  RETURN_IF_ERROR(ValidateRunRanges(o));
  if (o.goodput != "measure" && o.goodput != "nominal") {
    return InvalidArgument("--goodput '" + o.goodput + "': expected measure or nominal");
  }
  ASSIGN_OR_RETURN(std::string spec, ResolveModelSpec(o.model_spec));
  ASSIGN_OR_RETURN(uint32_t vocab, ModelVocab(spec));
  WorkloadOptions wo = o.workload;
  wo.vocab = vocab;
  ASSIGN_OR_RETURN(ReplayWorkload workload, BuildWorkload(wo));
  progress << "workload " << workload.name << ": " << workload.agents.size() << " agents, "
           << workload.requests << " requests, " << workload.prompt_tokens << " prompt tokens ("
           << workload.context_tokens << " carried over), " << workload.gen_tokens
           << " generated\n";
  RETURN_IF_ERROR(testbed::RequireRoot("dualpath cluster run"));

  // One run per cluster at a time, held until after the tear-down below (declared first, so it
  // is released last).
  ASSIGN_OR_RETURN(RunLock claim, RunLock::Acquire(ReplayRoot(), o.name));
  const bool was_up = testbed::ClusterExists(o.name);
  ASSIGN_OR_RETURN(testbed::Cluster cluster, UseOrBringUpCluster(o, was_up, progress));
  ClusterGuard guard(o.name, !was_up && !o.keep, progress);
  // A stop that arrived while the cluster came up: the guard takes it down again.
  RETURN_IF_ERROR(CheckStop());

  RunShared run{.o = o, .cluster = cluster, .workload = workload, .spec = spec};
  // The fault's node, checked against the cluster before anything is started or written.
  if (o.fault && !o.fault->node.empty() && cluster.FindNode(o.fault->node) == nullptr) {
    return InvalidArgument("--fault: no node '" + o.fault->node + "' in " + cluster.PdSpec());
  }
  ASSIGN_OR_RETURN(run.kill_index, KillIndex(o, cluster));
  run.bin = o.dualpath_bin.empty() ? SelfExe() : o.dualpath_bin;
  run.run_id = RunId();
  // Logs live outside the cluster's state directory, so a failed run's logs survive
  // the cluster's tear-down; a successful run removes them unless --keep.
  run.work = ReplayRoot() + "/" + o.name + "-" + run.run_id;
  std::error_code ec;
  std::filesystem::create_directories(run.work, ec);
  if (ec) return IoError("create " + run.work + ": " + ec.message());
  progress << "logs: " << run.work << "\n";

  ASSIGN_OR_RETURN(run.goodput, MeasureGoodput(cluster, o.goodput, o.goodput_file_bytes, run.bin,
                                               run.work, progress));
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoints> metrics, OpenRunMetrics(o, cluster, progress));
  run.metrics = metrics.get();

  ClusterRunReport report;
  report.config_json = ConfigJson(o, cluster, workload, run.goodput, spec);
  for (const testbed::Node& n : cluster.nodes) {
    run.names.push_back(n.name);
    run.roles.push_back(std::string(testbed::RoleName(n.role)));
  }
  ASSIGN_OR_RETURN(run.auth, RunCredentials::Create(cluster, run.run_id));
  progress << "auth: engines" << (o.store ? " and the store (etcd, masters, nodes)" : "")
           << " use mutual TLS and a transfer token (" << run.auth->dir() << ")\n";

  // Declared after the cluster guard: the pools go before the cluster does.
  NodePools pools(cluster, o.pool);
  // The rack pool (--kv-substrate rack-pool): the cluster's (`cluster up --rack-pool`), or one of
  // this run's, whose servers and region go before the cluster does.
  std::unique_ptr<RackPool> own_rack;
  if (o.kv_substrate == "rack-pool") {
    ASSIGN_OR_RETURN(std::optional<RackPoolInfo> rack, LoadRackPool(cluster));
    if (rack && KillsRackManager(o)) {
      return InvalidArgument("--fault " + o.fault->ToString() + ": cluster '" + o.name +
                             "' has its own rack pool; the run kills only a server it started");
    }
    if (!rack) {
      RackPoolOptions ro;
      ro.model = o.rack_pool_model;
      ro.bytes = o.rack_pool_bytes;
      ro.dualpath_bin = run.bin;
      ASSIGN_OR_RETURN(own_rack, StartRackPool(cluster, ro, progress));
      rack = own_rack->info();
    } else {
      progress << "rack pool: the cluster's, " << rack->path << " (" << rack->model << ")\n";
    }
    run.rack_path = rack->path;
    run.own_rack = own_rack.get();
  }
  for (const std::string& system : o.systems) {
    RETURN_IF_ERROR(CheckStop());
    const std::string subdir = "replay-" + run.run_id + "-" + system;
    // The socket lives in the cluster's state directory (docs/e2e.md): it goes with the cluster.
    const SystemSetup setup{
        .run = run,
        .system = system,
        .subdir = subdir,
        .address = "unix:" + cluster.state_dir + "/" + subdir + ".sock",
    };
    ASSIGN_OR_RETURN(SystemRun system_run, RunSystem(setup, progress));
    report.runs.push_back(std::move(system_run));
  }

  if (o.check) {
    RETURN_IF_ERROR(CheckStop());
    RETURN_IF_ERROR(CheckRuns(spec, workload, o.check_threads, report.runs, progress));
  }
  if (!o.keep) {
    std::filesystem::remove_all(run.work, ec);
  }
  return report;
}

}  // namespace dualpath::replay
