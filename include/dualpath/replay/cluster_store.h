// `dualpath cluster up --store` (issue 16, docs/store.md "In the system"): the distributed KV store
// on a cluster that is up, for manual use (`dualpath store bench` / `store stats` inside a node's
// namespace, `dualpath engine --kv-store-*`): one etcd in the first node's namespace on its compute
// address, port kClusterStoreEtcdPort (peers on the next port, 127.0.0.1), two `dualpath store
// master` in the first two nodes' namespaces (port kClusterStoreMasterPort), one `dualpath store
// node --id i+1 --host <node>` per node (UCX tcp on comp0). The store cluster is named after the
// testbed cluster. As in `cluster run --store`, nothing runs with --insecure (docs/store.md
// "Security"): etcd, the masters and the nodes serve mutual TLS with certificates of a CA made
// for this store, and the nodes' transfer engines check a transfer token; both are kept in
// <state dir>/store-auth (ClusterStoreAuthDir, mode 0700, keys and token 0600), where a user of
// the store finds `client.crt`, `client.key`, `ca.crt` and `transfer.token`.
// StartClusterStore returns once the leader lists every node and leaves the processes running:
// they live in the cluster's namespaces, so `cluster down` stops them (and removes their tier
// files, etcd's data and the credentials with the state directory).
//
// `cluster run --store` starts a store of its own per system (ports 2379/2380/7400), so both can
// run on one cluster.
//
// Ownership: the processes belong to the cluster once started. Thread safety: one call at a time
// per cluster.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "dualpath/common/status.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::replay {

inline constexpr int kClusterStoreEtcdPort = 2479;
inline constexpr int kClusterStoreMasterPort = 7500;

struct ClusterStoreOptions {
  uint64_t dram_mib = 256;   // each store node's DRAM tier
  std::string dualpath_bin;  // empty: this executable
};

struct ClusterStoreInfo {
  std::string cluster;   // the store cluster's name (= the testbed cluster's)
  std::string etcd;      // HOST:PORT, reachable from every node's namespace
  std::string auth_dir;  // the store's credentials (ClusterStoreAuthDir)
};

// Where `cluster up --store` keeps the store's CA certificate, certificates, keys and token.
std::string ClusterStoreAuthDir(const testbed::Cluster& cluster);

// Errors: a process that exited (naming it and its log), kTimeout when the leader does not list
// every node within 60 s; whatever was started is stopped again on an error.
Result<ClusterStoreInfo> StartClusterStore(const testbed::Cluster& cluster,
                                           const ClusterStoreOptions& options,
                                           std::ostream& progress);

}  // namespace dualpath::replay
