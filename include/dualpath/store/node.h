// StoreNode: what `dualpath store node` runs on every node of a store cluster (issue 16,
// docs/store.md "Store node and client").
//
// A store node contributes one DRAM tier to the cluster-wide store:
//   - the tier is a file <shm_dir>/dualpath-store-<cluster>-<id>: a header page naming the cluster,
//     the node and its incarnation (random per start; docs/formats/store_tier_file.md), then
//     dram_bytes of data (space reserved with posix_fallocate, so a full /dev/shm is an error at
//     start, never SIGBUS later), mapped MAP_SHARED; the data is registered with the node's own
//     TransferEngine, which listens for writers and readers: they move bytes with one-sided puts
//     and gets at region base + offset, where offset is what the master handed out. A client on
//     the same host maps the same file instead, once it verified the header. The node
//     holds an exclusive flock on the file while it lives; a file left by a dead node (no lock) is
//     replaced at start, one held by a live node makes the start fail. Shutdown removes the file.
//   - it registers in etcd (coord::Membership) as `store-node-<id>` under a lease of
//     membership_ttl; the value is its StoreNode gRPC address. The registration refuses an id a
//     live node holds (Start fails with kAlreadyExists), and a key deleted while the lease lives is
//     put back (a new registration: the node joins again);
//   - it follows the leader master (coord::LeaderElection::Observe on the cluster's leader key,
//     whose value is the leader's StoreMaster address, plus a periodic re-read in case the watch
//     ends) and sends JoinNode (endpoint, DRAM TierSpec, member name and every replica it holds)
//     whenever the leader changes, the membership was re-registered under a new lease, the
//     joined leader's Stats (asked every leader_poll) no longer lists the node, or
//     RequestRejoin() was called; a failed join is retried with backoff until it succeeds;
//   - it serves StoreNode gRPC (Record, Forget): the leader keeps the node's replica table in step
//     with commits and removals, and the table is what the node reports at its next join.
// The node moves no bytes itself: the transfer engine serves remote puts and gets into its region.
//
// Ownership: the StoreNode owns its file, mapping, transfer engine, gRPC server, etcd client and
// threads. Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/ids.h"
#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/store/types.h"
#include "dualpath/transfer/engine.h"

namespace dualpath::store {

struct NodeOptions {
  // The store cluster's name (coord rules: [A-Za-z0-9._-], 1..64 characters).
  std::string cluster;
  coord::EtcdOptions etcd;
  // This node's id, >= 1 (the testbed node's id).
  NodeId id;
  // The host name clients compare with their own to read through the shm file; empty:
  // gethostname().
  std::string host;
  // DRAM tier capacity in bytes, > 0.
  uint64_t dram_bytes = 0;
  // Fractions of dram_bytes (0 < low <= high <= 1), or both 0 for the master's defaults.
  double high_watermark = 0;
  double low_watermark = 0;
  // Where the DRAM tier file lives (a tmpfs: /dev/shm).
  std::string shm_dir = "/dev/shm";
  // The transfer engine's listener, "HOST:PORT" (port 0: any); HOST is what peers connect to.
  std::string transfer_listen = "127.0.0.1:0";
  // Polling by default: after each transfer event (a segment of a client's put or get arrived or
  // left) the node's transfer thread keeps polling for transfer.idle_spin (200 us, at most
  // 100 ms) before it sleeps; busy_poll = false sleeps at once. A put or get streams segments a
  // fraction of a millisecond apart; sleeping between them cost a wake-up each, which on hosts
  // whose idle cores halt (VMs) is an exit to the hypervisor, and put the node's receive behind
  // the client's send (docs/store.md "Polling instead of sleeping").
  transfer::EngineConfig transfer = {.busy_poll = true};
  // The StoreNode gRPC listener ("HOST:PORT" or "unix:PATH") and its transport security.
  std::string rpc_listen = "127.0.0.1:0";
  GrpcTls rpc_tls;
  // Transport security of the node's calls to the master.
  GrpcTls master_tls;
  // The etcd membership lease: how long after a crash the node is still listed. 1 s .. 1 h.
  Nanos membership_ttl = 10 * kNanosPerSecond;
  // Start waits this long (at least membership_ttl + 5 s) for the registration in etcd. The id is
  // held by one live registration: a predecessor's key (a crashed node) is waited out, and a live
  // node holding the id makes Start fail with kAlreadyExists (coord::Membership::Register).
  Nanos register_timeout = 30 * kNanosPerSecond;
  // Deadline of each JoinNode call.
  Nanos rpc_timeout = 5 * kNanosPerSecond;
  // A failed join is retried after 50 ms, doubling up to this.
  Nanos join_backoff_max = 2 * kNanosPerSecond;
  // The leader key is re-read, and the joined leader asked whether it still lists this node
  // (StoreMaster.Stats), this often.
  Nanos leader_poll = 2 * kNanosPerSecond;
  // Replicas per JoinNode part (1 .. kMaxJoinReplicas; store.proto): a report of more goes in
  // parts. Tests make it small to exercise the parts without tens of thousands of replicas.
  size_t join_part_replicas = kMaxJoinReplicas;
};

// What the node advertises (store.proto NodeEndpoint).
struct NodeAddress {
  NodeId id;
  std::string host;
  std::string transfer_addr;
  std::string rpc_addr;
  std::string shm_path;
  uint64_t dram_bytes = 0;
  // Drawn at random at each start and written in the tier file's header: a same-host client
  // maps the file only when the header names the incarnation the master handed out.
  uint64_t incarnation = 0;
};

// One replica in the node's table (what it reports to a leader).
struct NodeReplica {
  ObjectKey key;
  Tier tier = Tier::kDram;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;

  bool operator==(const NodeReplica&) const = default;
};

struct NodeStats {
  uint64_t joins = 0;          // successful JoinNode calls
  uint64_t join_failures = 0;  // failed JoinNode calls (each retried)
  std::string leader_addr;     // the leader the node follows ("" when none is known)
  std::string leader_id;       // the JoinNodeResponse.leader_id of the last successful join
  std::string joined_addr;     // the address that join went to
  uint64_t records = 0;        // Record RPCs served
  uint64_t forgets = 0;        // Forget RPCs served
  uint64_t replicas = 0;       // replicas in the table now
  int64_t registrations = 0;   // etcd registrations (1, more after a lost lease)
  uint64_t forgotten = 0;      // times the joined leader no longer listed this node (re-joined)
};

class StoreNode {
 public:
  // Checks the options (kInvalidArgument naming the bad one), creates the tier file, starts the
  // transfer engine and the gRPC server, registers in etcd (waiting up to register_timeout) and
  // starts following the leader. kAlreadyExists when a live node holds the tier file.
  static Result<std::unique_ptr<StoreNode>> Start(NodeOptions options);
  ~StoreNode();  // Shutdown
  StoreNode(const StoreNode&) = delete;
  StoreNode& operator=(const StoreNode&) = delete;

  // Deregisters from etcd (the master drops the node at once), stops serving, removes the tier
  // file. Idempotent.
  Status Shutdown();
  // As kill -9 would: stops keeping the etcd lease alive (the node leaves when it expires),
  // stops serving gRPC and transfers, leaves the tier file behind. For tests.
  void Abandon();

  const NodeAddress& address() const;
  // The mapped DRAM tier (for tests: corrupt a replica, look at bytes); nullptr after Shutdown or
  // Abandon, which unmap it.
  uint8_t* dram_base() const;

  std::vector<NodeReplica> Replicas() const;
  NodeStats Stats() const;
  // Joins the leader again (with backoff until it succeeds), e.g. after a master call answered
  // kStoreUnknownNode.
  void RequestRejoin();

  // The DRAM tier file's path for (shm_dir, cluster, id).
  static std::string ShmPath(const std::string& shm_dir, const std::string& cluster, NodeId id);
  // The etcd membership name, "store-node-<id>".
  static std::string MemberName(NodeId id);

  struct Impl;

 private:
  explicit StoreNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dualpath::store
