// RunStore: the distributed KV store of one system's `cluster run --store` (issue 16, docs/store.md
// "In the system"): one etcd, two store masters and one store node per testbed node, each a child
// process the run owns.
//
//   - etcd (Debian's /usr/bin/etcd) in the first node's namespace, on its compute address (port
//     2379; peers on 127.0.0.1:2380 there), data in <state_dir>/<name>-etcd, removed at the end;
//   - `dualpath store master` in the first two nodes' namespaces, on their compute addresses
//     (port 7400), plaintext gRPC;
//   - `dualpath store node --id i+1 --host <node name>` in every node's namespace: transfers on its
//     compute address over UCX tcp pinned to comp0 (store traffic crosses the shaped compute
//     link), --dram-mib of DRAM tier in /dev/shm, the run's transfer token.
// Start returns once the leader answers Stats with every node joined (`dualpath store stats
// --min-nodes N` run in the first node's namespace). Everything runs plaintext on the emulated
// compute network (the transfer engine still checks the run's token).
//
// Ownership: the RunStore owns its children; the destructor stops them in order (nodes, masters,
// etcd; TERM, then KILL after a grace) on every path and removes the etcd data directory.
// Thread safety: one owner thread.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "child.h"
#include "dualpath/common/status.h"
#include "dualpath/testbed/testbed.h"

namespace dualpath::replay {

struct RunStoreConfig {
  std::string bin;         // the dualpath executable
  std::string name;        // the store cluster's name (etcd keys, shm file names)
  std::string work;        // log directory
  std::string data_dir;    // etcd's data directory (created; removed at the end)
  std::string token_path;  // the run's transfer token file
  uint64_t dram_mib = 256;
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
  // Leaves every child running (`cluster up --store`): `cluster down` kills them with everything
  // else in the cluster's namespaces. Nothing is stopped or removed afterwards.
  void Detach();

 private:
  RunStore(const testbed::Cluster& cluster, RunStoreConfig config)
      : cluster_(cluster), config_(std::move(config)) {}
  Result<int> RunStats(uint64_t min_nodes, const std::string& log, double retry_s);

  const testbed::Cluster& cluster_;
  const RunStoreConfig config_;
  std::string etcd_;
  std::optional<Child> etcd_child_;
  std::vector<Child> masters_;
  std::vector<Child> nodes_;
  int stats_calls_ = 0;
  bool detached_ = false;
};

}  // namespace dualpath::replay
