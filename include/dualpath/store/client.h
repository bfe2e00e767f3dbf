// StoreClient: the client library of the distributed KV store (issue 16, docs/store.md "Store
// node and client"): batch put, batch get-into, exists and remove.
//
// The client finds the leader master through etcd (the cluster's leader key holds its StoreMaster
// address), asks it where to write or read, and moves the bytes itself:
//   - to or from a node on the same host (NodeEndpoint.host == ClientOptions::host) with memcpy
//     through the node's DRAM tier file (mapped MAP_SHARED), once the file is verified to be that
//     node's (ClientOptions::shm_dir; a file that is not is never mapped nor written);
//   - to or from another node with the transfer engine: one-sided puts and gets at the node's
//     advertised region base + offset. A get lands straight in the caller's buffer when that lies
//     inside a region registered with RegisterBuffer, else in a staging buffer and then a memcpy.
// Every read is checked against the committed size and checksum, recomputed under the key the
// caller asked for (ObjectChecksum: seeded with the key, so another key's bytes fail it whatever
// location and checksum the master hands out); a failed read or a mismatch tries the next
// replica, and an object none of whose replicas reads back right is a miss: a hit never leaves
// wrong bytes in the caller's buffer (a miss may leave any).
//
// Retries: a call that meets UNAVAILABLE, a timeout, "not the leader" (kCoordNotLeader) or no
// leader in etcd re-reads the leader from etcd and tries again, with backoff, until
// retry_deadline has passed since the call began (each try's deadline is cut to what is left of
// it). A call that gave up on such an error leaves the cached leader suspect: the next call
// re-reads etcd first, so a leader that stopped answering (partitioned, frozen) is not asked
// again once etcd names its successor. A put whose commit the new leader does not know
// (kStoreUnknownPut after a failover) is put again within the same deadline.
//
// Ownership: the client owns its etcd client, channels, transfer engine, staging buffer and
// mappings; buffers passed in are the caller's and must stay valid for the call (registered ones
// until UnregisterBuffer).
// Thread safety: every method may be called from any thread; batch calls run one at a time (they
// share the staging buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/ids.h"
#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/kv/block_hash.h"
#include "dualpath/store/types.h"
#include "dualpath/transfer/engine.h"

namespace dualpath::store {

// The tcp segment of the store client's puts: one segment carries an object of up to 1 MiB.
inline constexpr uint64_t kStoreTcpSegBytes = transfer::kLargeTcpSegBytes;

struct ClientOptions {
  std::string cluster;
  coord::EtcdOptions etcd;
  // Transport security towards the master.
  GrpcTls master_tls;
  // The node this client runs beside (the master's preferred node for puts); 0: none.
  NodeId local_node;
  // This client's host name: replicas on a node with the same host are read and written through
  // the node's shm file. Empty: gethostname(). local_shm false: never (always the network).
  std::string host;
  bool local_shm = true;
  // Where this host's store nodes keep their tier files (their --shm-dir). A same-host node's
  // file is mapped only at the path the client names itself (<shm_dir>/dualpath-store-<cluster>-
  // <id>), as a regular file owned by this process's effective user and writable by no one else,
  // whose header names this cluster, the node and the incarnation the master handed out; any
  // other file is refused (logged once, counted in shm_refused) and the node is used over the
  // network instead.
  std::string shm_dir = "/dev/shm";
  // The client's transfer engine. Its puts over tcp travel in segments of kStoreTcpSegBytes
  // (issue 27): UCX 1.13 emulates a put over tcp with active messages, each segment copied into a
  // send buffer, sent, received into a buffer and copied into the tier; with the engines' 72 KiB a
  // 1 MiB object took 15 segments, and the node spent 27-43 CPU-ms per 64 MiB put against 15-24
  // with 1 MiB segments (docs/store.md "UCX tcp put"). Store nodes (any engine) receive them.
  // With busy_poll its idle_spin may be 0..100 ms.
  transfer::EngineConfig transfer = {.tcp_seg_size = kStoreTcpSegBytes};
  // The transfer engine's thread polls while a get's transfers are in flight (transfer::Batch::
  // poll) and sleeps between events otherwise: a get's segments arrive one after another, and a
  // thread that slept between them paid a wake-up per segment, which on hosts whose idle cores
  // halt (VMs) held the UCX tcp get below Mooncake's. Puts are not polled: the node receives
  // them, and a polling client thread beside the copy threads slowed the 1 MiB puts on two cores
  // (docs/store.md "The client polls while its gets are in flight"). false: gets sleep too, for
  // processes that share few cores with the nodes they read (`cluster run --store`'s engines).
  bool transfer_poll = true;
  // Deadline of each master call (each try; no try outlasts the call's retry_deadline either).
  Nanos rpc_timeout = 5 * kNanosPerSecond;
  // How long a call keeps retrying after leader changes and unreachable masters.
  Nanos retry_deadline = 15 * kNanosPerSecond;
  // Replicas per put (1..3).
  uint32_t replicas = 1;
  // Initial size of the staging buffer for network transfers of unregistered memory (it grows to
  // the largest batch's need).
  uint64_t staging_bytes = 4ull << 20;
  // Threads that copy and checksum one batch's bytes on this host (same-host tier files, the
  // staging buffer, the checksums of remote puts and gets), the calling thread included, for
  // batches of at least 4 MiB. 0: the machine's hardware threads, at most 8 (KVStore's rule).
  unsigned copy_threads = 0;
  // Master calls one Exists keeps in flight at once (1..64). 1 (the default): one call per
  // kMaxBatchKeys keys, one after another. More: a batch of n keys goes as
  // min(exists_in_flight, ceil(n / 128)) calls of equal parts (more when a part would exceed
  // kMaxBatchKeys), sent together on the leader's channel from the calling thread and answered in
  // order, so the parts' round trips overlap each other and the master's lookups. Each extra call
  // costs ~100 us of CPU across client and master, so it pays only where both have idle cores
  // (docs/store.md "Exists over gRPC": on the shared 2-core VM it did not).
  uint32_t exists_in_flight = 1;
  // How long the calling thread polls for an Exists answer before it sleeps until the answer
  // comes (0: sleep at once). A sleeping thread is woken by the kernel when the answer arrives,
  // and on hosts whose idle cores halt (VMs: each wake-up is an exit to the hypervisor) that
  // wake-up cost a third of a 1,000-key call's ~0.3-0.4 ms; polling keeps the core awake and
  // sees the answer as it lands (docs/store.md "Exists: polling for the answer"). Polling spends
  // the caller's CPU while it waits, at most this long per call.
  Nanos exists_poll = kNanosPerMilli;
  // Asked before each transfer to a node, with the node's transfer address, and before each call
  // to the leader master, with its address (host:port): true skips it as unreachable instead of
  // waiting for a connect, the transfer engine's peer timeout or the call's deadline. A skipped
  // node's reads are misses and its writes fail (kUnavailable); a skipped leader is looked up
  // again in etcd once in that call (a successor may lead already), and if etcd still names it
  // the call fails at once (kUnavailable, not retried). An engine's partition handling sets it
  // (docs/engine.md "Failures"). Empty: never skipped. Called from the client's calling threads.
  std::function<bool(const std::string& addr)> skip_addr;
};

struct PutItem {
  ObjectKey key;
  std::span<const std::byte> bytes;  // any memory; > 0 bytes
};

struct GetItem {
  ObjectKey key;
  std::span<std::byte> dest;  // must hold the object (its size is the master's)
};

enum class ReadSource { kNone, kLocal, kRemote };

struct ReadResult {
  // OK: a hit, the object's bytes are in dest[0, size). Otherwise a miss and why: kNotFound (not
  // in the store), kCorruption (every replica failed its checksum), kOutOfRange (dest too small),
  // kTransferPeerDead / kUnavailable (no replica could be read), ...
  Status status;
  ReadSource source = ReadSource::kNone;
  NodeId node;        // the node the bytes came from
  uint64_t size = 0;  // the object's size when found
};

struct ExistsReply {
  std::vector<bool> found;   // per key: committed and visible
  uint64_t prefix_hits = 0;  // leading found keys
};

struct ClientStats {
  uint64_t puts_ok = 0;         // items stored (or already present)
  uint64_t puts_failed = 0;     // items not stored
  uint64_t put_aborts = 0;      // puts aborted after a failed write
  uint64_t hits_local = 0;      // gets served through a same-host shm file
  uint64_t hits_remote = 0;     // gets served over the transfer engine
  uint64_t misses = 0;          // gets that were misses, for any reason
  uint64_t bad_replicas = 0;    // replica reads that failed or mismatched (a next one was tried)
  uint64_t rejected = 0;        // of those, replicas whose bytes failed the key-bound checksum
                                // (damaged, stale, or another key's: a forged record)
  uint64_t shm_refused = 0;     // same-host tier files refused (not the node's: see LocalTier)
  uint64_t bytes_written = 0;   // bytes written to replicas (each copy counted)
  uint64_t bytes_read = 0;      // bytes of hits
  uint64_t retries = 0;         // master calls tried again (leader change, unreachable)
  uint64_t leader_lookups = 0;  // reads of the leader key
  uint64_t pin_renewals = 0;    // RenewPin calls (reads that outlasted half their pin)
  uint64_t unpins = 0;          // Unpin calls made (after GetInto returned, on the client's thread)
  // Where puts' wall time went (issue 27), summed over Put calls, nanoseconds: the PutStart round
  // trips, the writes (transfers, same-host copies and the checksums beside them), and the
  // PutCommit/PutAbort round trips. What is left of a call's time is planning and bookkeeping.
  uint64_t put_start_ns = 0;
  uint64_t put_write_ns = 0;
  uint64_t put_commit_ns = 0;
  // The transfer engine's descriptors (one per object and replica moved over the network) and
  // the operations they went to UCX as: objects laid out back to back on both sides move as one
  // operation (transfer::Batch::coalesce).
  uint64_t transfer_descs = 0;
  uint64_t transfer_ops = 0;
};

// The leader master's view (StoreMaster.Stats): the cluster's objects and each node's DRAM tier.
struct LeaderNodeUsage {
  NodeId node;
  uint64_t dram_capacity = 0;
  uint64_t dram_used = 0;
  uint64_t dram_replicas = 0;
};
struct LeaderStatsReply {
  std::string leader_id;
  uint64_t nodes = 0;  // live nodes joined
  uint64_t objects = 0;
  uint64_t pending_puts = 0;
  uint64_t evicted_replicas = 0;
  std::vector<LeaderNodeUsage> usage;
};

class StoreClient {
 public:
  // Checks the options (kInvalidArgument naming the bad one) and connects to etcd lazily.
  static Result<std::unique_ptr<StoreClient>> Create(ClientOptions options);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Stores each item (reserve, write every replica, commit; abort on a failed write). Per item:
  // OK when stored or already present (equal keys mean equal bytes), else why not. The whole call
  // fails only for bad input (an empty batch, an item of 0 bytes).
  Result<std::vector<Status>> Put(std::span<const PutItem> items);
  // Reads each found object into its dest (see the class comment); per item a ReadResult. The
  // whole call fails only for bad input or when the master could not be reached in time. The
  // objects are unpinned on the client's own thread after the call returned.
  Result<std::vector<ReadResult>> GetInto(std::span<const GetItem> items);
  // Which keys of one model are committed, and the leading hits.
  Result<ExistsReply> Exists(uint64_t model_fingerprint, std::span<const kv::BlockHash> hashes);
  // Removes the keys; returns how many were removed.
  Result<uint64_t> Remove(std::span<const ObjectKey> keys);

  // The leader's Stats (retried across leader changes like every master call).
  Result<LeaderStatsReply> LeaderStats();

  // Registers caller memory for zero-copy remote gets (and puts) from or into it.
  Status RegisterBuffer(void* addr, uint64_t length);
  Status UnregisterBuffer(void* addr);

  ClientStats Stats() const;
  // The leader address the client uses now ("" before the first call).
  std::string leader() const;

  struct Impl;

 private:
  explicit StoreClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dualpath::store
