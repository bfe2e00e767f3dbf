#include "run_store.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dualpath/common/log.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/coord/etcd_server.h"
#include "dualpath/replay/cluster_store.h"
#include "dualpath/replay/replayer.h"

namespace dualpath::replay {
namespace {

std::vector<std::string> InNetns(const testbed::Node& n, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"ip", "netns", "exec", n.netns});
  return argv;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status Died(const std::string& what, Child& c) {
  const std::optional<int> st = c.Poll();
  return Unavailable(what + " exited (" + (st ? DescribeWaitStatus(*st) : "still running") +
                     "); log " + c.log_path() + ":\n" + c.LogTail(1500));
}

}  // namespace

Result<std::unique_ptr<RunStore>> RunStore::Start(const testbed::Cluster& cluster,
                                                  const RunStoreConfig& config,
                                                  std::ostream& progress) {
  if (cluster.nodes.empty()) return InvalidArgument("store: the cluster has no nodes");
  if (config.auth == nullptr) return InvalidArgument("store: no credentials");
  const RunCredentials& auth = *config.auth;
  std::unique_ptr<RunStore> s(new RunStore(cluster, config));
  const testbed::Node& first = cluster.nodes[0];
  s->etcd_ = first.compute_addr + ":" + std::to_string(config.etcd_port);
  std::error_code ec;
  std::filesystem::remove_all(config.data_dir, ec);
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec) return IoError("create " + config.data_dir + ": " + ec.message());

  // etcd, its masters and nodes all speak mutual TLS with the run's certificates (nothing here
  // passes --insecure): etcd's client and peer listeners require a client certificate of the
  // run's CA, and the masters and nodes reach etcd with their own (store master/node use their
  // --tls-* towards etcd when no --etcd-tls-* is given).
  coord::EtcdServerConfig etcd_config;
  etcd_config.name = "dp-store";
  etcd_config.data_dir = config.data_dir + "/data";
  etcd_config.client_addr = s->etcd_;
  etcd_config.peer_addr = "127.0.0.1:" + std::to_string(config.etcd_peer_port);
  etcd_config.tls = auth.EtcdFiles();
  ASSIGN_OR_RETURN(Child etcd,
                   Child::Spawn(InNetns(first, coord::EtcdServerArgv(etcd_config)),
                                config.work + "/" + config.name + "_etcd.log", {}, config.daemons));
  s->etcd_child_.emplace(std::move(etcd));

  const std::vector<std::string> etcd_flags = {"--cluster", config.name, "--etcd", s->etcd_};
  // Two masters (one if the cluster has a single node): the first two nodes.
  for (size_t i = 0; i < cluster.nodes.size() && i < 2; ++i) {
    const testbed::Node& n = cluster.nodes[i];
    std::vector<std::string> argv = {config.bin, "store", "master"};
    argv.insert(argv.end(), etcd_flags.begin(), etcd_flags.end());
    argv.insert(argv.end(), {"--listen", n.compute_addr + ":" + std::to_string(config.master_port),
                             "--election-ttl", FormatNumber(config.ttl_s)});
    for (std::string& a : auth.TlsArgs(n.name)) argv.push_back(std::move(a));
    argv = InNetns(n, argv);
    s->master_argv_.push_back(argv);
    s->master_down_.push_back(false);
    ASSIGN_OR_RETURN(
        Child m, Child::Spawn(argv, config.work + "/" + config.name + "_master_" + n.name + ".log",
                              {}, config.daemons));
    s->masters_.push_back(std::move(m));
  }
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const testbed::Node& n = cluster.nodes[i];
    std::vector<std::string> argv = {config.bin, "store", "node"};
    argv.insert(argv.end(), etcd_flags.begin(), etcd_flags.end());
    argv.insert(argv.end(), {"--id", std::to_string(i + 1), "--host", n.name, "--dram-mib",
                             std::to_string(config.dram_mib), "--transfer-listen",
                             n.compute_addr + ":0", "--rpc-listen", n.compute_addr + ":0",
                             "--ucx-tls", "tcp", "--ucx-net-devices", n.compute_if, "--ttl",
                             FormatNumber(config.ttl_s), "--transfer-token-file", auth.token_path(),
                             // The emulated nodes share the host's few cores with the engines and
                             // the storage server: a node polling after each event would take CPU
                             // they need (docs/store.md "Polling instead of sleeping").
                             "--transfer-poll-us", "0"});
    for (std::string& a : auth.TlsArgs(n.name)) argv.push_back(std::move(a));
    argv = InNetns(n, argv);
    s->node_argv_.push_back(argv);
    s->node_down_.push_back(false);
    ASSIGN_OR_RETURN(
        Child c, Child::Spawn(argv, config.work + "/" + config.name + "_node_" + n.name + ".log",
                              {}, config.daemons));
    s->nodes_.push_back(std::move(c));
  }

  // Until the leader lists every node (each try is a short-lived `store stats`).
  const Nanos deadline = WallClock().Now() + FromSeconds(config.start_timeout_s);
  while (true) {
    RETURN_IF_ERROR(CheckStop());
    RETURN_IF_ERROR(s->Health());
    Result<int> rc =
        s->RunStats(cluster.nodes.size(), config.work + "/" + config.name + "_stats_wait.log", 2);
    if (rc.ok() && *rc == 0) break;
    if (WallClock().Now() > deadline) {
      return Timeout("store " + config.name + ": the leader does not list all " +
                     std::to_string(cluster.nodes.size()) + " nodes after " +
                     std::to_string(config.start_timeout_s) + " s; logs in " + config.work);
    }
    // A bounded pause that also notices etcd dying; the loop's exit is the condition above.
    (void)s->etcd_child_->Wait(200 * kNanosPerMilli);
  }
  progress << "store " << config.name << ": etcd " << s->etcd_ << ", " << s->masters_.size()
           << " masters, " << s->nodes_.size() << " nodes x " << config.dram_mib << " MiB DRAM up\n"
           << std::flush;
  return s;
}

Result<int> RunStore::RunStats(uint64_t min_nodes, const std::string& log, double retry_s) {
  std::error_code ec;
  std::filesystem::remove(log, ec);
  std::vector<std::string> argv = {config_.bin, "store",      "stats",
                                   "--cluster", config_.name, "--etcd",
                                   etcd_,       "--retry",    std::to_string(retry_s)};
  for (std::string& a : config_.auth->TlsArgs(RunCredentials::kClient))
    argv.push_back(std::move(a));
  if (min_nodes > 0) {
    argv.push_back("--min-nodes");
    argv.push_back(std::to_string(min_nodes));
  }
  ASSIGN_OR_RETURN(Child c, Child::Spawn(InNetns(cluster_.nodes[0], argv), log));
  return c.Wait(FromSeconds(retry_s + 20));
}

Result<std::string> RunStore::StatsJson() {
  return StatsLine(config_.work + "/" + config_.name + "_stats.log", 10);
}

Result<std::string> RunStore::StatsLine(const std::string& log, double retry_s) {
  ASSIGN_OR_RETURN(int rc, RunStats(0, log, retry_s));
  const std::string text = ReadFile(log);
  // The JSON object is the line that starts with '{' (warnings go to the same log).
  std::istringstream lines(text);
  std::string line, found;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') found = line;
  }
  if (rc != 0 || found.empty()) {
    return Unavailable("store stats (exit " + DescribeWaitStatus(rc) + "): " + text);
  }
  return found;
}

Status RunStore::Health() {
  if (etcd_child_ && etcd_child_->Poll().has_value()) return Died("etcd", *etcd_child_);
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (!master_down_[i] && masters_[i].Poll().has_value()) {
      return Died("store master " + cluster_.nodes[i].name, masters_[i]);
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!node_down_[i] && nodes_[i].Poll().has_value()) {
      return Died("store node " + cluster_.nodes[i].name, nodes_[i]);
    }
  }
  return Status::Ok();
}

void RunStore::Detach() {
  for (Child& c : nodes_) c.Detach();
  for (Child& c : masters_) c.Detach();
  if (etcd_child_) etcd_child_->Detach();
  nodes_.clear();
  masters_.clear();
  etcd_child_.reset();
  detached_ = true;
}

void RunStore::Stop() {
  (void)EndWatch();
  if (detached_) return;
  // Nodes first (they deregister and remove their tier files), then the masters, then etcd.
  for (Child& c : nodes_) c.Signal(SIGTERM);
  for (Child& c : nodes_) (void)c.Stop(5 * kNanosPerSecond);
  for (Child& c : masters_) (void)c.Stop(5 * kNanosPerSecond);
  if (etcd_child_) (void)etcd_child_->Stop(5 * kNanosPerSecond);
  nodes_.clear();
  masters_.clear();
  etcd_child_.reset();
  std::error_code ec;
  std::filesystem::remove_all(config_.data_dir, ec);
  // A node killed after the grace leaves its DRAM tier file (StoreNode::ShmPath's naming).
  for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
    std::filesystem::remove("/dev/shm/dualpath-store-" + config_.name + "-" + std::to_string(i + 1),
                            ec);
  }
}

// ---------------------------------------------------------------------------------------------
// Faults (docs/faults.md).

namespace {

constexpr Nanos kKillReapTimeout = 10 * kNanosPerSecond;  // SIGKILL is not blocked by anything
constexpr double kWatchLimitS = 60;                       // the watch gives up after this
constexpr auto kWatchInterval = std::chrono::milliseconds(50);

nlohmann::json ParseStats(const std::string& line) {
  return nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
}

// The usage entry of store node `id` in a Stats line, or null.
nlohmann::json UsageOf(const nlohmann::json& stats, uint64_t id) {
  if (!stats.is_object() || !stats.contains("usage")) return nullptr;
  for (const nlohmann::json& u : stats["usage"]) {
    if (u.value("node", uint64_t{0}) == id) return u;
  }
  return nullptr;
}

}  // namespace

int RunStore::NodeIndex(const std::string& node) const {
  for (size_t i = 0; i < cluster_.nodes.size() && i < nodes_.size(); ++i) {
    if (cluster_.nodes[i].name == node) return static_cast<int>(i);
  }
  return -1;
}

Result<std::string> RunStore::KillNode(const std::string& node) {
  const int i = NodeIndex(node);
  if (i < 0) return InvalidArgument("store-node fault: no store node on '" + node + "'");
  if (node_down_[i]) return FailedPrecondition("store node " + node + " is already down");
  const uint64_t id = static_cast<uint64_t>(i) + 1;
  // The watch's baseline: the node's replicas as the leader lists them just before the kill.
  uint64_t before = 0;
  if (Result<std::string> st = StatsJson(); st.ok()) {
    const nlohmann::json u = UsageOf(ParseStats(*st), id);
    if (u.is_object()) before = u.value("dram_replicas", uint64_t{0});
  }
  Child& c = nodes_[static_cast<size_t>(i)];
  const pid_t pid = c.pid();
  c.Signal(SIGKILL);
  node_down_[static_cast<size_t>(i)] = true;
  if (!c.Wait(kKillReapTimeout).ok()) {
    return Timeout("store node " + node + " pid " + std::to_string(pid) +
                   " still running 10 s after SIGKILL");
  }
  // Reacted: the leader lists the node no more (its lease expired), or with fewer replicas than
  // before (it re-joined, restarted with an empty tier, and the leader replaced it).
  StartWatch([id, before](const std::string& line, double) -> std::optional<std::string> {
    const nlohmann::json st = ParseStats(line);
    if (!st.is_object()) return std::nullopt;
    const nlohmann::json u = UsageOf(st, id);
    if (u.is_null()) {
      return "the leader dropped node " + std::to_string(id) + " (no longer listed)";
    }
    const uint64_t now = u.value("dram_replicas", uint64_t{0});
    if (now < before) {
      return "the leader lists node " + std::to_string(id) + " with " + std::to_string(now) +
             " replicas (re-joined empty)";
    }
    return std::nullopt;
  });
  return "store node " + node + " (id " + std::to_string(id) + ") pid " + std::to_string(pid) +
         " killed (SIGKILL), " + std::to_string(before) + " replicas on it";
}

Result<std::string> RunStore::RestartNode(const std::string& node) {
  const int i = NodeIndex(node);
  if (i < 0 || !node_down_[static_cast<size_t>(i)]) {
    return FailedPrecondition("store node " + node + " is not down");
  }
  const size_t k = static_cast<size_t>(i);
  const std::string log = nodes_[k].log_path();
  ASSIGN_OR_RETURN(Child c, Child::Spawn(node_argv_[k], log, {}, config_.daemons));
  const pid_t pid = c.pid();
  nodes_[k] = std::move(c);
  node_down_[k] = false;
  return "started again (same id, empty tier), pid " + std::to_string(pid);
}

Result<std::string> RunStore::KillLeader() {
  if (killed_master_ >= 0) return FailedPrecondition("a store master is already down");
  ASSIGN_OR_RETURN(std::string line, StatsJson());
  const std::string leader = ParseStats(line).value("leader", std::string());
  int idx = -1;
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (leader == cluster_.nodes[i].compute_addr + ":" + std::to_string(config_.master_port)) {
      idx = static_cast<int>(i);
    }
  }
  if (idx < 0) {
    return NotFound("store-leader fault: the leader '" + leader +
                    "' is none of this run's masters");
  }
  Child& c = masters_[static_cast<size_t>(idx)];
  const pid_t pid = c.pid();
  c.Signal(SIGKILL);
  master_down_[static_cast<size_t>(idx)] = true;
  killed_master_ = idx;
  if (!c.Wait(kKillReapTimeout).ok()) {
    return Timeout("store master " + leader + " pid " + std::to_string(pid) +
                   " still running 10 s after SIGKILL");
  }
  // Reacted: another leader term (the standby, or the restarted master: the term id names the
  // address, the term's number and its start, so a restarted master is a new term) answers Stats
  // with as many nodes joined as before the kill (they join it with their reports: it serves).
  const nlohmann::json before = ParseStats(line);
  const std::string old_term = before.value("leader_id", std::string());
  const uint64_t old_nodes = before.value("nodes", uint64_t{0});
  StartWatch([old_term, old_nodes, first = std::optional<double>()](
                 const std::string& now_line, double t) mutable -> std::optional<std::string> {
    const nlohmann::json st = ParseStats(now_line);
    if (!st.is_object()) return std::nullopt;
    const std::string term = st.value("leader_id", std::string());
    if (term.empty() || term == old_term) return std::nullopt;
    if (!first) first = t;
    const uint64_t nodes = st.value("nodes", uint64_t{0});
    if (nodes < old_nodes) return std::nullopt;
    return "a new leader (term " + term + ") first answered Stats " + FormatNumber(*first) +
           " s after the kill and listed all " + std::to_string(nodes) + " nodes joined";
  });
  return "leader master " + leader + " on " + cluster_.nodes[static_cast<size_t>(idx)].name +
         " pid " + std::to_string(pid) + " killed (SIGKILL)";
}

Result<std::string> RunStore::RestartMaster() {
  if (killed_master_ < 0) return FailedPrecondition("no store master is down");
  const size_t k = static_cast<size_t>(killed_master_);
  const std::string log = masters_[k].log_path();
  ASSIGN_OR_RETURN(Child c, Child::Spawn(master_argv_[k], log, {}, config_.daemons));
  const pid_t pid = c.pid();
  masters_[k] = std::move(c);
  master_down_[k] = false;
  killed_master_ = -1;
  return "started again (a standby), pid " + std::to_string(pid);
}

void RunStore::StartWatch(
    std::function<std::optional<std::string>(const std::string&, double)> seen) {
  (void)EndWatch();
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = false;
    watch_result_.clear();
  }
  const Nanos start = WallClock().Now();
  // One `store stats` process per look (the leader is in the namespaces, this process is not);
  // the thread waits for each, so what it spawns never outlives it.
  watch_ = std::thread([this, seen = std::move(seen), start] {
    const std::string log = config_.work + "/" + config_.name + "_stats_watch.log";
    int looks = 0;
    std::string result;
    while (true) {
      Result<std::string> line = StatsLine(log, 1);
      ++looks;
      const double t = ToSeconds(WallClock().Now() - start);
      std::optional<std::string> what = line.ok() ? seen(*line, t) : std::nullopt;
      if (what) {
        result = *what + " " + FormatNumber(t) + " s after the kill (look " +
                 std::to_string(looks) + " at the leader's Stats)";
        break;
      }
      if (t > kWatchLimitS) {
        result = "no change in the leader's Stats within " + FormatNumber(kWatchLimitS) + " s (" +
                 std::to_string(looks) + " looks)";
        break;
      }
      std::unique_lock lock(watch_mu_);
      // The interval between looks; the stop flag ends it at once.
      if (watch_cv_.wait_for(lock, kWatchInterval, [this] { return watch_stop_; })) {
        result = "the replay ended before the leader's Stats changed (" + std::to_string(looks) +
                 " looks in " + FormatNumber(t) + " s)";
        break;
      }
    }
    std::lock_guard lock(watch_mu_);
    watch_result_ = std::move(result);
  });
}

std::string RunStore::EndWatch() {
  if (!watch_.joinable()) return "";
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  watch_.join();
  std::lock_guard lock(watch_mu_);
  return watch_result_;
}

RunStore::~RunStore() { Stop(); }

std::string ClusterStoreAuthDir(const testbed::Cluster& cluster) {
  return cluster.state_dir + "/store-auth";
}

Result<ClusterStoreInfo> StartClusterStore(const testbed::Cluster& cluster,
                                           const ClusterStoreOptions& options,
                                           std::ostream& progress) {
  RunStoreConfig sc;
  sc.bin = options.dualpath_bin;
  if (sc.bin.empty()) {
    std::error_code ec;
    sc.bin = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) return Internal("cluster up --store: cannot find this executable: " + ec.message());
  }
  sc.name = cluster.name;
  sc.work = cluster.state_dir + "/log";
  sc.data_dir = cluster.state_dir + "/store-etcd";
  sc.dram_mib = options.dram_mib;
  sc.etcd_port = kClusterStoreEtcdPort;
  sc.etcd_peer_port = kClusterStoreEtcdPort + 1;
  sc.master_port = kClusterStoreMasterPort;
  sc.daemons = true;
  std::error_code ec;
  std::filesystem::create_directories(sc.work, ec);
  // The store's PKI and token stay in the state directory for its users until `cluster down`.
  ASSIGN_OR_RETURN(std::unique_ptr<RunCredentials> auth,
                   RunCredentials::CreateIn(cluster, ClusterStoreAuthDir(cluster)));
  sc.auth = auth.get();
  ASSIGN_OR_RETURN(std::unique_ptr<RunStore> store, RunStore::Start(cluster, sc, progress));
  ClusterStoreInfo info{cluster.name, store->etcd(), auth->dir()};
  store->Detach();
  auth->Keep();
  return info;
}

}  // namespace dualpath::replay
