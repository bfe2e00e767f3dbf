// The rack pool of a testbed cluster (issue 29, docs/pool.md "Rack mode", docs/e2e.md "KV
// substrate"): one pool region that every node's engines map, standing in for a rack's CXL memory
// (on the testbed every node is a network namespace of one host, so a file under /dev/shm is
// mapped by all of them; on real hardware the path is a DAX device or a hugetlbfs file).
//
// StartRackPool creates the region (model coherent or noncoherent, lease `lease_ms`, one node id
// per cluster node: node i of Cluster::nodes is rack node i) and starts `dualpath pool serve` in
// the first node's namespace as node 0, the region's lock manager, and in the non-coherent model
// a standby on the second node (node 1) that takes the role over when the first dies (docs/pool.md
// "Lock manager fail-over"). It returns once a probe got the metadata lock (so a manager serves),
// and, for `cluster up` (options.daemons), records the rack pool in <state dir>/rack_pool.json.
//
// `cluster up --rack-pool` detaches the servers (they live in the cluster's namespaces, so `cluster
// down` stops them) and `cluster down` removes the region (StopRackPool). `cluster run
// --kv-substrate rack-pool` uses the cluster's rack pool, or starts one of its own for the run
// (servers owned by the run, region removed at its end).
//
// Ownership: RackPoolServers owns its processes until Detach. Thread safety: one call at a time
// per cluster.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::replay {

// Input ranges (docs/testbed.md "Rack pool").
inline constexpr uint64_t kMinRackPoolBytes = 64ull << 20;
inline constexpr uint64_t kMaxRackPoolBytes = 1ull << 40;
inline constexpr uint64_t kMinRackPoolLeaseMs = 50;
inline constexpr uint64_t kMaxRackPoolLeaseMs = 60'000;

struct RackPoolOptions {
  std::string model = "coherent";  // "coherent" | "noncoherent"
  uint64_t bytes = 1ull << 30;     // data size of the region
  std::string path;                // empty: DefaultRackPoolPath(cluster)
  uint64_t lease_ms = 1000;        // the region's lease: a dead manager is replaced after it
  std::string dualpath_bin;        // empty: this executable
  // The servers outlive this process (cluster up, which Detach()es them); otherwise they are
  // killed when the thread that started them dies (cluster run).
  bool daemons = false;
};

struct RackPoolInfo {
  std::string path;
  std::string model;
  uint64_t bytes = 0;
  uint64_t lease_ms = 0;
  struct Server {
    std::string node;  // cluster node name
    uint32_t rack_node = 0;
    int pid = 0;
  };
  std::vector<Server> servers;
};

// /dev/shm/<cluster>-rack.pool
std::string DefaultRackPoolPath(const testbed::Cluster& cluster);
// <state dir>/rack_pool.json
std::string RackPoolStatePath(const testbed::Cluster& cluster);

// A rack pool StartRackPool made. Destroying it stops its servers and removes the region and the
// state file, unless Detach()ed.
class RackPool {
 public:
  RackPool(RackPoolInfo info, const testbed::Cluster& cluster);
  ~RackPool();
  RackPool(const RackPool&) = delete;
  RackPool& operator=(const RackPool&) = delete;
  const RackPoolInfo& info() const { return info_; }
  // Leaves the servers running and the region in place (cluster up): `cluster down` stops them
  // and removes it.
  void Detach();
  // SIGKILLs the server holding the lock-manager role (a fault for tests: issue 29 acceptance 4)
  // and reaps it; returns its node name. kNotFound when no server of this pool holds the role.
  Result<std::string> KillManager();

 private:
  friend Result<std::unique_ptr<RackPool>> StartRackPool(const testbed::Cluster&,
                                                         const RackPoolOptions&, std::ostream&);
  struct Servers;
  RackPoolInfo info_;
  testbed::Cluster cluster_;
  std::unique_ptr<Servers> servers_;
  bool detached_ = false;
};

// Errors: bad options (kInvalidArgument naming the flag), an existing file at the path
// (kAlreadyExists: never overwritten), a size /dev/shm cannot hold (kStorageNoSpace), a server
// that exits at once (kUnavailable with its log), no lock grant within 3 leases (kTimeout). On an
// error nothing is left: servers killed, region removed.
Result<std::unique_ptr<RackPool>> StartRackPool(const testbed::Cluster& cluster,
                                                const RackPoolOptions& options,
                                                std::ostream& progress);
// The cluster's rack pool as recorded by StartRackPool; nullopt if it has none.
Result<std::optional<RackPoolInfo>> LoadRackPool(const testbed::Cluster& cluster);
// Removes the region of `info` (Pool::Destroy checks it is a pool first) and the state file.
// The servers must be gone (cluster down stops every process of the cluster first).
Status RemoveRackPool(const testbed::Cluster& cluster, const RackPoolInfo& info);
// One line about the rack pool for `cluster status` (geometry, occupancy, lock manager).
std::string DescribeRackPool(const RackPoolInfo& info);

}  // namespace dualpath::replay
