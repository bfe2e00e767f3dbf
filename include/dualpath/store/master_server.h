// MasterServer: `dualpath store master`, the StoreMaster gRPC service around MasterState, with
// leader election and node membership through etcd (issue 16; docs/store.md "The master server").
//
// Every master serves StoreMaster on its own address and campaigns for the cluster's leader key
// (/dualpath/<cluster>/leader, value: the address clients should call). Only the leader answers;
// a standby refuses every call with FAILED_PRECONDITION "not the leader" (kCoordNotLeader), and a
// client re-reads the leader key and calls again. While it leads, a master:
//   - holds a fresh MasterState (created when it won; a new leader knows nothing, and holds
//     eviction for one pin TTL, since readers may still read under pins taken on the old leader);
//   - watches the store nodes' etcd membership (/dualpath/<cluster>/nodes/store-node-<id>): a node
//     whose key goes (its lease expired: the node is dead) is removed at once, with its replicas;
//   - accepts JoinNode only from a node that etcd lists, and rebuilds the node's objects from the
//     replicas it reports (a re-join of a live node replaces it: a restarted node reports what it
//     still holds);
//   - answers reads and writes only once every node etcd lists has joined (or its key went), or
//     the join grace after it won (by default the listed nodes' longest remaining lease TTL + 2 s;
//     until then UNAVAILABLE "rebuilding", which clients retry): a client never sees the
//     half-rebuilt metadata as misses of objects on live nodes;
//   - records each commit on the replicas' nodes (StoreNode.Record) before PutCommit answers, and
//     forgets removed objects on every node (StoreNode.Forget) before Remove answers, so that the
//     nodes' reports to the next leader hold every acknowledged commit and no acknowledged removal;
//   - runs MasterState::Tick every `tick_interval` (put timeouts, pin expiry, watermark eviction).
// A master that loses its lease (etcd unreachable for longer than the TTL) stops answering at once
// and campaigns again.
//
// Ownership: the server owns its etcd client, election, node watch, gRPC server and threads.
// Thread safety: every public method may be called from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/store/master_state.h"

namespace dualpath::store {

// The text a standby's refusal starts with (FAILED_PRECONDITION); clients look for it.
inline constexpr std::string_view kNotLeaderText = "not the leader";

// The etcd membership name of store node `id`: "store-node-<id>".
std::string StoreNodeMemberName(NodeId id);
// The node id in a membership name, or nullopt for a name that is not a store node's.
std::optional<NodeId> ParseStoreNodeMemberName(std::string_view name);

struct MasterServerOptions {
  // The cluster's name ([A-Za-z0-9._-], 1..64): the etcd key prefix /dualpath/<cluster>/.
  std::string cluster;
  coord::EtcdOptions etcd;
  // Where StoreMaster is served: HOST:PORT (port 0: any) or unix:PATH.
  std::string listen;
  GrpcTls tls;  // of the StoreMaster listener (grpc_tls.h rules)
  // What the leader key says (the address clients dial); empty: the bound address.
  std::string advertise;
  // Towards the nodes' StoreNode listeners.
  GrpcTls node_tls;
  MasterConfig state;
  // The campaign lease's TTL: how long a dead leader blocks a standby at most (1 s .. 1 h).
  Nanos election_ttl = 10 * kNanosPerSecond;
  // How long a new leader waits for the listed nodes to join before it serves anyway. nullopt
  // (the default): derived from the listed nodes' etcd leases, the longest remaining TTL + 2 s
  // (at most 62 s): a dead listed node's key is gone by then, a live one has joined.
  std::optional<Nanos> join_grace;
  Nanos tick_interval = 100 * kNanosPerMilli;
  // Deadline of each Record/Forget call to a node.
  Nanos node_rpc_timeout = 2 * kNanosPerSecond;
};

class MasterServer {
 public:
  // Connects to etcd, binds the listener and starts campaigning. Errors name the bad option, the
  // unreachable etcd or the taken address.
  static Result<std::unique_ptr<MasterServer>> Start(MasterServerOptions options);
  ~MasterServer();  // Shutdown()
  MasterServer(const MasterServer&) = delete;
  MasterServer& operator=(const MasterServer&) = delete;

  // The bound StoreMaster address (port 0 replaced).
  const std::string& address() const;
  // Whether this master leads and serves (joined nodes or grace over), as far as it knows.
  bool IsServing() const;
  bool IsLeader() const;
  // Blocks until this master serves as the leader, or `timeout` (kTimeout).
  Status WaitUntilServing(Nanos timeout);
  // Statistics of the leader's MasterState (nullopt on a standby).
  std::optional<MasterStats> Stats() const;
  // How many times this master became the leader.
  int64_t terms() const;

  // Resigns (the key goes at once, a standby takes over), stops serving and joins the threads.
  void Shutdown();
  // Stops serving and stops keeping its lease alive without telling etcd, as kill -9 would: a
  // standby takes over when the lease expires. For tests.
  void Abandon();

  class Impl;

 private:
  explicit MasterServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dualpath::store
