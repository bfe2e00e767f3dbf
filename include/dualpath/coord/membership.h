// coord::Membership: which nodes of a cluster are alive, kept in etcd (docs/coord.md).
//
// A node registers itself as the key /dualpath/<cluster>/nodes/<name> with a value of its choosing
// (its addresses, say), attached to an etcd lease of `ttl`. A thread of the Membership keeps the
// lease alive (a keep-alive every ttl/3 on one LeaseKeepAlive stream). When the process dies, the
// keep-alives stop, etcd expires the lease after at most `ttl` and deletes the key: every watcher
// sees the node leave. So "registered" means "its process answered etcd within the last TTL".
//
// A name is held by one registration at a time: the key is put with a transaction that succeeds
// only if the key does not exist, so a second process registering a name another live process
// holds is refused (kAlreadyExists), and a registration never takes the key from another lease.
//
// On its own, without a restart of the process, the registration survives:
//   - etcd restarting on its data dir: etcd restores the lease with a fresh TTL; the keep-alive
//     stream breaks, is re-opened and answered again; the key is then checked and put back if it
//     is missing;
//   - etcd losing the lease (it expired while we could not reach etcd for a whole TTL, someone
//     revoked it, or etcd came back without its data): a new lease is granted and the key is put
//     again under it (registrations() counts each time);
//   - the key deleted while the lease lives (an operator's delete, the expiry of a duplicate's
//     lease that had overwritten it with an older build): a watch of the key sees it go, and it is
//     put back under the lease (registrations() counts it: watchers saw the node leave).
// Meanwhile the node may be absent from the list for up to the outage plus one TTL.
//
// Anyone (a master, a client) lists the live nodes (ListNodes) and follows joins and leaves
// (WatchNodes) without registering.
//
// Thread safety: every method may be called from any thread. Callbacks of WatchNodes run on the
// watch's thread. The EtcdClient must outlive the Membership and its watches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_client.h"

namespace dualpath::coord {

struct MembershipOptions {
  // The cluster's name: [A-Za-z0-9._-], 1..64 characters.
  std::string cluster;
  // The lease's TTL: how long a dead node stays listed at most. 1 s .. 1 h; etcd may round up.
  Nanos ttl = 10 * kNanosPerSecond;
};

struct NodeInfo {
  std::string name;
  std::string value;
  LeaseId lease = 0;
  int64_t mod_revision = 0;
};

struct NodeEvent {
  enum class Kind { kJoined, kLeft };
  Kind kind = Kind::kJoined;
  std::string name;
  std::string value;  // empty for kLeft
  int64_t revision = 0;
};

// What WatchNodes returns: the live nodes when the watch started, and the watch, which delivers
// every join and leave after that snapshot (none missed, none twice).
struct NodeWatch {
  std::vector<NodeInfo> nodes;
  int64_t revision = 0;
  std::unique_ptr<Watch> watch;
};

class Membership {
 public:
  // Checks the options (kInvalidArgument naming the bad one).
  static Result<std::unique_ptr<Membership>> Create(EtcdClient* client, MembershipOptions options);
  ~Membership();  // Deregister (best effort) if registered
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Registers this node as `name` (same rules as the cluster name, 1..128 characters) with
  // `value`, and keeps it registered until Deregister. Returns once the key is in etcd, or with the
  // error if that did not happen within `timeout` (the background thread then keeps trying).
  // A key of the same name under another lease is never overwritten: Register waits while that
  // lease runs down (an earlier incarnation of the node that died: etcd deletes its key within
  // its TTL) and takes the name when it is free, and returns kAlreadyExists, registering nothing,
  // once the holder shows it is alive (its lease is renewed, or outlives its remaining TTL + 2 s).
  // So a duplicate is refused within about one TTL; `timeout` should exceed the TTL + 2 s.
  // kFailedPrecondition if already registered.
  Status Register(const std::string& name, const std::string& value, Nanos timeout);
  // Deletes the key, revokes the lease and stops the thread.
  Status Deregister();
  // Stops keeping the lease alive without telling etcd, as a crash would: the key disappears
  // when the lease expires. For tests and for a node that must vanish from the cluster at once
  // while it cannot reach etcd.
  void Abandon();

  // Whether the key is in etcd under a lease we keep alive, as far as this process knows.
  bool registered() const;
  // How many times the key was put under a new lease (1 after Register; more after re-registering).
  int64_t registrations() const;
  // Answered keep-alives of the current lease, and the lease (0 when none).
  int64_t keepalives() const;
  LeaseId lease() const;

  // The live nodes, in name order.
  Result<std::vector<NodeInfo>> ListNodes();
  // The live nodes and a watch of joins and leaves after them. `on_event` runs on the watch's
  // thread; `on_error` (may be empty) if the watch ends for good (docs/coord.md).
  Result<NodeWatch> WatchNodes(std::function<void(const NodeEvent&)> on_event,
                               std::function<void(const Status&)> on_error = {});

  // The key layout (docs/coord.md): /dualpath/<cluster>/nodes/ and .../nodes/<name>.
  static std::string NodesPrefix(const std::string& cluster);
  static std::string NodeKey(const std::string& cluster, const std::string& name);

  struct Impl;

 private:
  explicit Membership(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks a cluster or node name: 1..max_len characters of [A-Za-z0-9._-]. `what` names it in the
// message ("cluster", "node name").
Status CheckCoordName(const std::string& name, const char* what, size_t max_len);

}  // namespace dualpath::coord
