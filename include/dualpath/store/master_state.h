// MasterState: the metadata core of `dualpath store master` (issue 16), with no networking.
//
// It knows the store nodes (their capacity per tier and watermarks), every object's replicas,
// every put in progress and every reader's pin, and decides placement and eviction. It moves no
// bytes: writers and readers move them over the transfer engine to and from the locations it
// hands out. A later step puts it behind gRPC and etcd (membership feeds AddNode/RemoveNode, a new
// leader calls RebuildFromReports). docs/store.md is the protocol and its consistency promises.
//
//   put:  PutStart (reserve space on 1..3 distinct live nodes) -> the writer writes the bytes ->
//         PutCommit (now visible). PutAbort, or no commit within put_timeout, returns the space;
//         such an object is never visible.
//   read: Get (replicas of committed objects only; pins each returned object until Unpin or
//         pin_ttl) -> the reader reads the bytes -> Unpin. A pinned object's space is never freed
//         (eviction skips it; Remove hides it at once but frees its space at the last unpin).
//   evict: per node and tier, when used > high watermark, least recently used (by last Get or
//         commit) unpinned committed replicas go until used <= low watermark; an object whose
//         last replica goes disappears. PutStart also evicts on a node that cannot fit a put.
//   time: every timeout is measured on the injected Clock and enforced by Tick(), which the
//         service calls periodically (tests call it after advancing a ManualClock).
//
// Space on a node's tier is a byte range [0, capacity) handed out first-fit in multiples of
// MasterConfig::alignment; a replica's offset is its place in that range.
//
// Ownership: MasterState owns all its metadata; the Clock is borrowed and must outlive it.
// Thread safety: every method may be called from any thread. Each takes the one lock, so each call
// is atomic with respect to the others (a Get sees a put either not at all or committed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/store/types.h"

namespace dualpath::store {

struct MasterConfig {
  // A reservation not committed within this long is reclaimed by Tick().
  Nanos put_timeout = 30 * kNanosPerSecond;
  // A pin not unpinned within this long is released by Tick().
  Nanos pin_ttl = 10 * kNanosPerSecond;
  // Space is reserved in multiples of this (a power of two, 1 .. 1 MiB): 4096 keeps every offset
  // and length O_DIRECT-aligned for the SSD tier.
  uint64_t alignment = 4096;
};

// One tier of one node. A capacity of 0 means the node has no such tier.
struct TierSpec {
  uint64_t capacity = 0;
  // Fractions of capacity, 0 < low <= high <= 1: above high, evict down to low.
  double high_watermark = 0.95;
  double low_watermark = 0.85;
};

struct NodeSpec {
  NodeId id;
  TierSpec dram;
  TierSpec ssd;
};

struct PutOptions {
  int replicas = 1;  // 1 .. kMaxReplicas, each on a different node
  Tier tier = Tier::kDram;
  // Placed first if it is live, has the tier and fits (typically the writer's own node).
  std::optional<NodeId> preferred_node;
};

// PutStart's answer: where to write, and by when to commit.
struct PutTicket {
  PutId id;
  Nanos deadline = 0;  // on the master's clock
  std::vector<Replica> locations;
};

// One key of a Get: found (committed and visible) or not.
struct ObjectInfo {
  bool found = false;
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::vector<Replica> replicas;
};

struct GetResult {
  // Pins every found object until Unpin(pin) or pin_expires_at. Absent when nothing was found.
  std::optional<PinId> pin;
  Nanos pin_expires_at = 0;
  std::vector<ObjectInfo> objects;  // one per key, in order
};

struct ExistsResult {
  // Number of leading keys that exist (vLLM's lookup: the hit prefix of a request's blocks).
  size_t prefix_hits = 0;
  std::vector<uint8_t> found;  // one per key: 1 if committed and visible
};

// A replica a store node reports holding (a new leader rebuilds its metadata from these).
struct ReportedReplica {
  ObjectKey key;
  Tier tier = Tier::kDram;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
};

struct RebuildOutcome {
  size_t accepted = 0;
  // Each rejected report with why (overlap, a conflicting size or checksum, bad range, ...).
  std::vector<std::pair<ObjectKey, Status>> rejected;
};

struct TierUsage {
  uint64_t capacity = 0;
  uint64_t used = 0;  // reserved + committed + removed-but-pinned, in aligned bytes
  uint64_t replicas = 0;
};

struct TickStats {
  size_t expired_puts = 0;
  size_t expired_pins = 0;
  size_t evicted_replicas = 0;
};

struct MasterStats {
  size_t nodes = 0;
  size_t objects = 0;        // committed and visible
  size_t pending_puts = 0;   // reserved, not yet committed
  size_t pins = 0;           // live pins (one per Get that found something)
  size_t hidden_pinned = 0;  // removed or node-orphaned objects kept until their last unpin
  uint64_t evicted_replicas = 0;
  uint64_t expired_puts = 0;
  uint64_t expired_pins = 0;
};

class MasterState {
 public:
  // Rejects a config outside its stated ranges.
  static Result<std::unique_ptr<MasterState>> Create(const MasterConfig& config,
                                                     const Clock& clock);
  ~MasterState();
  MasterState(const MasterState&) = delete;
  MasterState& operator=(const MasterState&) = delete;

  // ---- membership ----
  // A new live node. kStoreNodeExists if the id is live already; kInvalidArgument for no tier or
  // bad watermarks.
  Status AddNode(const NodeSpec& spec);
  // The node is dead: every replica on it is dropped at once (objects left with none disappear;
  // puts left with none are aborted) and it is never handed out again. kStoreUnknownNode if not
  // live. The same id may be added again later, empty (a restarted node).
  Status RemoveNode(NodeId node);
  // Ids of the live nodes, ascending.
  std::vector<NodeId> LiveNodes() const;

  // ---- put ----
  // Reserves `size` bytes for `key` on options.replicas distinct live nodes. kStoreObjectExists
  // if the key is committed, kStorePutPending if another put of it is in progress.
  Result<PutTicket> PutStart(const ObjectKey& key, uint64_t size, const PutOptions& options);
  // Makes the object visible with this checksum on every replica still live.
  // kStoreUnknownPut if the put is not in progress (never started, committed, aborted, expired).
  Status PutCommit(PutId put, uint64_t checksum);
  // Returns the reservation's space; the object never becomes visible.
  Status PutAbort(PutId put);

  // ---- read ----
  // Replicas of the committed objects among `keys`; pins each found object (see GetResult).
  // Counts as a use for LRU.
  GetResult Get(std::span<const ObjectKey> keys);
  // Releases a pin. kStoreUnknownPin if it is not live (never given, unpinned, or expired).
  Status Unpin(PinId pin);
  // Extends a live pin to now + pin_ttl; returns the new expiry.
  Result<Nanos> RenewPin(PinId pin);
  // Committed-and-visible flags, and the hit prefix. Does not pin and is not a use for LRU.
  ExistsResult Exists(std::span<const ObjectKey> keys) const;
  // Removes committed objects; returns how many of `keys` were removed. A removed object is
  // invisible at once; its space returns at once if unpinned, else at its last unpin.
  size_t Remove(std::span<const ObjectKey> keys);

  // ---- time ----
  // Reclaims expired reservations, releases expired pins, evicts above the high watermarks.
  TickStats Tick();

  // ---- standby master ----
  // Records replicas a live node reports holding, as committed objects (merged with other nodes'
  // reports of the same key). kStoreUnknownNode if `node` is not live; each bad report is
  // rejected on its own and listed in the outcome.
  Result<RebuildOutcome> RebuildFromReports(NodeId node, std::span<const ReportedReplica> reports);
  // No eviction (by watermark or by PutStart) before `until` on the clock. A new leader knows no
  // pins (readers pinned on the old one): it calls HoldEviction(now + pin_ttl) so that no block a
  // reader may still be reading is freed; puts that need eviction meanwhile get kStoreNoSpace.
  void HoldEviction(Nanos until);

  // ---- observation ----
  Result<TierUsage> Usage(NodeId node, Tier tier) const;
  MasterStats Stats() const;
  // Walks every structure and checks that the accounting agrees (space, LRU lists, pins).
  // For tests: O(objects).
  Status CheckConsistency() const;

 private:
  class Impl;  // src/store/master_impl.h
  explicit MasterState(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dualpath::store
