#include "run_store.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dualpath/common/log.h"
#include "dualpath/common/stop_signal.h"
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
  std::unique_ptr<RunStore> s(new RunStore(cluster, config));
  const testbed::Node& first = cluster.nodes[0];
  s->etcd_ = first.compute_addr + ":" + std::to_string(config.etcd_port);
  std::error_code ec;
  std::filesystem::remove_all(config.data_dir, ec);
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec) return IoError("create " + config.data_dir + ": " + ec.message());

  const std::string client_url = "http://" + s->etcd_;
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(config.etcd_peer_port);
  const std::string member = "dp-store";
  ASSIGN_OR_RETURN(
      Child etcd,
      Child::Spawn(
          InNetns(
              first,
              {"/usr/bin/etcd", "--name=" + member, "--data-dir=" + config.data_dir + "/data",
               "--listen-client-urls=" + client_url, "--advertise-client-urls=" + client_url,
               "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
               "--initial-cluster=" + member + "=" + peer_url, "--logger=zap", "--log-level=warn"}),
          config.work + "/" + config.name + "_etcd.log", {}, config.daemons));
  s->etcd_child_.emplace(std::move(etcd));

  const std::vector<std::string> etcd_flags = {"--cluster", config.name, "--etcd", s->etcd_,
                                               "--etcd-insecure"};
  // Two masters (one if the cluster has a single node): the first two nodes.
  for (size_t i = 0; i < cluster.nodes.size() && i < 2; ++i) {
    const testbed::Node& n = cluster.nodes[i];
    std::vector<std::string> argv = {config.bin, "store", "master"};
    argv.insert(argv.end(), etcd_flags.begin(), etcd_flags.end());
    argv.insert(argv.end(), {"--listen", n.compute_addr + ":" + std::to_string(config.master_port),
                             "--insecure"});
    ASSIGN_OR_RETURN(
        Child m, Child::Spawn(InNetns(n, argv),
                              config.work + "/" + config.name + "_master_" + n.name + ".log", {},
                              config.daemons));
    s->masters_.push_back(std::move(m));
  }
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const testbed::Node& n = cluster.nodes[i];
    std::vector<std::string> argv = {config.bin, "store", "node"};
    argv.insert(argv.end(), etcd_flags.begin(), etcd_flags.end());
    argv.insert(argv.end(), {"--id", std::to_string(i + 1), "--host", n.name, "--dram-mib",
                             std::to_string(config.dram_mib), "--transfer-listen",
                             n.compute_addr + ":0", "--rpc-listen", n.compute_addr + ":0",
                             "--ucx-tls", "tcp", "--ucx-net-devices", n.compute_if, "--insecure"});
    if (!config.token_path.empty()) {
      argv.insert(argv.end(), {"--transfer-token-file", config.token_path});
    }
    ASSIGN_OR_RETURN(
        Child c,
        Child::Spawn(InNetns(n, argv), config.work + "/" + config.name + "_node_" + n.name + ".log",
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
  std::vector<std::string> argv = {config_.bin,
                                   "store",
                                   "stats",
                                   "--cluster",
                                   config_.name,
                                   "--etcd",
                                   etcd_,
                                   "--etcd-insecure",
                                   "--master-insecure",
                                   "--retry",
                                   std::to_string(retry_s)};
  if (min_nodes > 0) {
    argv.push_back("--min-nodes");
    argv.push_back(std::to_string(min_nodes));
  }
  ASSIGN_OR_RETURN(Child c, Child::Spawn(InNetns(cluster_.nodes[0], argv), log));
  ++stats_calls_;
  return c.Wait(FromSeconds(retry_s + 20));
}

Result<std::string> RunStore::StatsJson() {
  const std::string log = config_.work + "/" + config_.name + "_stats.log";
  ASSIGN_OR_RETURN(int rc, RunStats(0, log, 10));
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
    if (masters_[i].Poll().has_value()) {
      return Died("store master " + cluster_.nodes[i].name, masters_[i]);
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].Poll().has_value()) {
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

RunStore::~RunStore() { Stop(); }

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
  ASSIGN_OR_RETURN(std::unique_ptr<RunStore> store, RunStore::Start(cluster, sc, progress));
  ClusterStoreInfo info{cluster.name, store->etcd()};
  store->Detach();
  return info;
}

}  // namespace dualpath::replay
