// StoreClient's internals, shared by client.cc (the leader, master calls, exists, remove) and
// client_data.cc (the data path of puts and gets: shm mappings, transfer peers, staging).
//
// Locks: batch_mu serialises the batch calls (Put, GetInto), which alone touch the staging
// buffer, the peer cache and the mappings; leader_mu guards the leader's address and stub;
// buffers_mu the registered buffers; stats_mu the counters; unpin_mu the unpin queue. No lock is
// held across another except batch_mu, which is taken first.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dualpath/coord/leader_election.h"
#include "dualpath/store/client.h"
#include "dualpath/store/v1/store.grpc.pb.h"
#include "store/node_shm.h"

namespace dualpath::store {

// One part of an Exists batch (client.cc): keys [first, first + count) of the caller's hashes.
struct ExistsPart {
  size_t first = 0;
  size_t count = 0;
};

// A connected node: its transfer peer and its DRAM tier region as it advertised it.
struct ClientPeer {
  transfer::PeerId id;
  uint64_t base = 0;
  uint64_t length = 0;
};

struct StoreClient::Impl {
  ClientOptions options;
  std::unique_ptr<coord::EtcdClient> etcd;
  std::unique_ptr<coord::LeaderElection> observer;  // never campaigns: Leader() only
  std::unique_ptr<transfer::TransferEngine> engine;

  mutable std::mutex leader_mu;
  std::string leader_addr;
  std::shared_ptr<v1::StoreMaster::Stub> stub;
  // The last call to leader_addr gave up on an error that a leader change explains (unreachable,
  // a timeout, "not the leader"): the next call re-reads etcd before asking it. Guarded by
  // leader_mu.
  bool leader_suspect = false;

  std::mutex batch_mu;
  std::unique_ptr<std::byte[]> staging;
  uint64_t staging_size = 0;
  transfer::RegionId staging_region;
  std::unordered_map<std::string, ClientPeer> peers;                // by transfer address
  std::unordered_map<uint32_t, std::unique_ptr<ShmTier>> mappings;  // by node id
  // Tier files refused once ("<node>/<incarnation>/<path>"): not tried (nor logged) again.
  std::set<std::string> refused_tiers;
  // LocalTier's answers (a mapping or nullptr) for the master answer being worked on, by node id.
  // A tier is checked against its path (a stat) once per answer, not once per item: a batch of 256
  // items made 512 stat calls per put and per get (issue 27). Cleared by ForgetTierChecks() when
  // a new PutStart or Get answer arrives, whose endpoints may name a restarted node's new file.
  std::unordered_map<uint32_t, ShmTier*> tier_checks;
  void ForgetTierChecks() { tier_checks.clear(); }

  mutable std::mutex buffers_mu;
  std::map<uint64_t, std::pair<uint64_t, transfer::RegionId>> buffers;  // addr -> (length, id)

  mutable std::mutex stats_mu;
  ClientStats stats;

  // Unpins run on a thread of their own (a get returns once its bytes are in place); the
  // destructor drains the queue, trying each unpin once.
  std::mutex unpin_mu;
  std::condition_variable unpin_cv;
  std::deque<uint64_t> unpin_queue;
  bool unpin_stop = false;
  std::thread unpinner;
  void QueueUnpin(uint64_t pin);
  void UnpinLoop();
  void StopUnpinner();

  // --- client.cc ---
  // The leader's stub: the cached one, or (refresh, the cached one suspect, or none cached) the
  // one etcd names now.
  Result<std::pair<std::shared_ptr<v1::StoreMaster::Stub>, std::string>> Leader(bool refresh);
  // The cached leader gave a call up: the next Leader() re-reads etcd.
  void MarkLeaderSuspect();
  // Runs one master RPC, retrying (see client.h) until `until` (steady clock).
  using RpcFn = std::function<grpc::Status(v1::StoreMaster::Stub*, grpc::ClientContext*)>;
  Status CallMaster(std::string_view rpc, Nanos until, const RpcFn& fn);
  // Sends the Exists parts of `hashes` to the cached leader with up to options.exists_in_flight
  // calls in flight, each tried once, writing the answers into `found`; returns the indices of
  // the parts that failed (all of them when no leader is known or it is skipped), for CallMaster
  // to retry one by one. Thread-safe (its calls and completion queue are its own).
  std::vector<size_t> ExistsInFlight(uint64_t model_fingerprint,
                                     std::span<const kv::BlockHash> hashes,
                                     std::span<const ExistsPart> parts, Nanos until,
                                     std::vector<bool>* found);
  void Count(const std::function<void(ClientStats&)>& f) {
    std::lock_guard lock(stats_mu);
    f(stats);
  }

  // --- client_data.cc (REQUIRES batch_mu) ---
  // Whether [addr, addr + len) lies inside a registered buffer.
  bool Registered(const void* addr, uint64_t len) const;
  // Staging of at least `bytes`.
  Status EnsureStaging(uint64_t bytes);
  Result<ClientPeer> Peer(const v1::NodeEndpoint& ep);
  void DropPeer(const std::string& transfer_addr);
  // The node's shm file mapped, when it is on this host and verified to be the node's
  // (ShmTier::Open against ClientOptions::shm_dir, the cluster and the endpoint's incarnation);
  // nullptr otherwise (the caller uses the network).
  // Checked once per master answer (tier_checks).
  ShmTier* LocalTier(const v1::NodeEndpoint& ep);
  // LocalTier's work: the cached mapping if still the node's file (a stat of its path), else a
  // fresh verified mapping, else nullptr.
  ShmTier* LocalTierChecked(const v1::NodeEndpoint& ep);
  bool IsLocal(const v1::NodeEndpoint& ep) const;
  Result<std::vector<Status>> PutLocked(std::span<const PutItem> items);
  Result<std::vector<ReadResult>> GetLocked(std::span<const GetItem> items);
};

// Whether a failed master call is worth another try against a re-resolved leader.
bool RetryableMasterError(const Status& s);

}  // namespace dualpath::store
