// RunStore: the distributed KV store of one system's `cluster run --store` (issue 16, docs/store.md
// "In the system"): one etcd, two store masters and one store node per testbed node, each a child
// process the run owns.
//
//   - etcd (Debian's /usr/bin/etcd) in the first node's namespace, on its compute address (port
//     2379; peers on 127.0.0.1:2380 there), data in <state_dir>/<name>-etcd, removed at the end;
//   - `dualpath store master` in the first two nodes' namespaces, on their compute addresses
//     (port 7400);
//   - `dualpath store node --id i+1 --host <node name>` in every node's namespace: transfers on its
//     compute address over UCX tcp pinned to comp0 (store traffic crosses the shaped compute
//     link), --dram-mib of DRAM tier in /dev/shm, the run's transfer token.
// Nothing runs with --insecure (docs/store.md "Security"): etcd serves HTTPS with client
// certificates required (its certificate from the run's credentials, run_credentials.h), every
// master and node serves mutual TLS with its node's certificate and uses the same certificate
// towards etcd and its peers, and every node's transfer engine checks the run's token.
// Start returns once the leader answers Stats with every node joined (`dualpath store stats
// --min-nodes N` run in the first node's namespace, with the credentials' client certificate).
//
// Faults (`cluster run --fault store-node:NODE|store-leader`, docs/faults.md): KillNode and
// KillLeader SIGKILL one child and reap it; Health() passes over it until RestartNode /
// RestartMaster start it again with the same arguments (appending to the same log). Each kill
// starts a watch: a thread of the RunStore asks the leader's Stats (`store stats`, one process per
// look, ~50 ms apart) until the store has reacted (the dead node's replicas dropped, a new leader
// serving) or 60 s passed; EndWatch joins it and says what it saw. Measured, never asserted.
//
// Ownership: the RunStore owns its children; the destructor stops them in order (nodes, masters,
// etcd; TERM, then KILL after a grace) on every path and removes the etcd data directory.
// Thread safety: one owner thread (the watch's thread only runs `store stats` processes and
// touches nothing else but the watch's own state, under its mutex).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "child.h"
#include "dualpath/common/status.h"
#include "dualpath/testbed/testbed.h"
#include "run_credentials.h"

namespace dualpath::replay {

struct RunStoreConfig {
  std::string bin;       // the dualpath executable
  std::string name;      // the store cluster's name (etcd keys, shm file names)
  std::string work;      // log directory
  std::string data_dir;  // etcd's data directory (created; removed at the end)
  // Certificates and transfer token (not owned; must outlive the RunStore's Start and, for
  // restarts after a fault, the RunStore). Required.
  const RunCredentials* auth = nullptr;
  uint64_t dram_mib = 256;
  // The nodes' etcd membership lease (`store node --ttl`) and the masters' leader lease
  // (`store master --election-ttl`), seconds: how long a dead node stays listed, a dead leader
  // keeps the leader key.
  double ttl_s = 10;
  double start_timeout_s = 60;
  // etcd's client and peer ports and the masters' port (`cluster up --store` uses others than
  // `cluster run --store`, so a run's store can start beside the cluster's).
  int etcd_port = 2379;
  int etcd_peer_port = 2380;
  int master_port = 7400;
  // The processes outlive this one (`cluster up --store`: Detach() leaves them running); else
  // they are killed if this process dies.
  bool daemons = false;
};

class RunStore {
 public:
  static Result<std::unique_ptr<RunStore>> Start(const testbed::Cluster& cluster,
                                                 const RunStoreConfig& config,
                                                 std::ostream& progress);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  // etcd's client endpoint, HOST:PORT (reachable from every node's namespace).
  const std::string& etcd() const { return etcd_; }
  const std::string& name() const { return config_.name; }
  // An error naming the first child that exited.
  Status Health();
  // The leader's Stats as one JSON object (`dualpath store stats`).
  Result<std::string> StatsJson();
  // Stops every child (nodes first). Idempotent.
  void Stop();
  // Faults (above). KillNode: `node` is a testbed node's name; the detail names the pid and the
  // store node id. KillLeader: the master the leader's Stats name. Errors: no such node, no
  // leader found, a child that does not exit within 10 s of SIGKILL, a failed spawn.
  Result<std::string> KillNode(const std::string& node);
  Result<std::string> RestartNode(const std::string& node);
  Result<std::string> KillLeader();
  Result<std::string> RestartMaster();  // the master KillLeader killed
  // Ends the watch of the last kill (joining its thread) and says what it saw; "" without one.
  std::string EndWatch();

  // Leaves every child running (`cluster up --store`): `cluster down` kills them with everything
  // else in the cluster's namespaces. Nothing is stopped or removed afterwards.
  void Detach();

 private:
  RunStore(const testbed::Cluster& cluster, RunStoreConfig config)
      : cluster_(cluster), config_(std::move(config)) {}
  Result<int> RunStats(uint64_t min_nodes, const std::string& log, double retry_s);
  // The leader's Stats as one JSON line, `log` holding the output (any thread).
  Result<std::string> StatsLine(const std::string& log, double retry_s);
  // Starts the watch thread: `seen` gets each Stats line and the seconds since the kill, and
  // returns what the store did once it has reacted (nullopt: not yet).
  void StartWatch(std::function<std::optional<std::string>(const std::string&, double)> seen);
  int NodeIndex(const std::string& node) const;

  const testbed::Cluster& cluster_;
  const RunStoreConfig config_;
  std::string etcd_;
  std::optional<Child> etcd_child_;
  std::vector<Child> masters_;
  std::vector<Child> nodes_;
  // Each child's command and log, for a restart; whether a fault killed it (Health passes over).
  std::vector<std::vector<std::string>> master_argv_, node_argv_;
  std::vector<bool> master_down_, node_down_;
  int killed_master_ = -1;
  bool detached_ = false;

  // The watch of the last kill.
  std::thread watch_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;   // guarded by watch_mu_
  std::string watch_result_;  // guarded by watch_mu_
};

}  // namespace dualpath::replay
