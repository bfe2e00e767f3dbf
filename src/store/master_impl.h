// MasterState's private data structures (see dualpath/store/master_state.h for the contract).
//
// objects_ holds every pending and committed object by key; its elements never move (node-based
// map), so raw Object* pointers in the LRU lists, pending puts and pins stay valid until the
// element is erased. An object is erased only when nothing points at it: pinned objects are never
// evicted, and a pinned object that is removed (or loses its last node) is extracted from objects_
// into hidden_ (std::unordered_map node handles keep the element's address), invisible to every
// lookup, until its last unpin frees its space.
//
// Each (node, tier) keeps a doubly linked LRU list of the committed objects with a replica there,
// threaded through the replica slots themselves (ReplicaSlot::lru_prev/lru_next): the object's
// replicas are on distinct nodes, so (object, node) names one slot, and no allocation is made per
// list entry.
//
// Thread safety: MasterState::Impl has none of its own; every MasterState method takes mu_.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/store/master_state.h"
#include "dualpath/store/types.h"
#include "store/extent_allocator.h"

namespace dualpath::store {

enum class ObjectState : uint8_t {
  kPending,    // reserved by PutStart, not visible
  kCommitted,  // visible; its replicas are in their LRU lists
  kHidden,     // removed or orphaned while pinned: in hidden_, space held until the last unpin
};

struct Object;

struct ReplicaSlot {
  NodeId node;
  Tier tier = Tier::kDram;
  uint64_t offset = 0;
  // Committed objects only: neighbours in the LRU list of (node, tier); head is least recent.
  Object* lru_prev = nullptr;
  Object* lru_next = nullptr;
};

struct Object {
  // First, right after the key in the map node: Exists reads only the key and the state, so they
  // share a cache line as often as the allocator's alignment allows.
  ObjectState state = ObjectState::kPending;
  uint8_t num_replicas = 0;
  uint32_t pins = 0;               // live pin references (a key twice in one Get counts twice)
  const ObjectKey* key = nullptr;  // the map element's own key
  uint64_t size = 0;               // as the writer gave it (space taken is Aligned(size))
  uint64_t checksum = 0;
  uint64_t put_id = 0;  // kPending only
  std::array<ReplicaSlot, kMaxReplicas> replicas;

  ReplicaSlot* SlotOn(NodeId node) {
    for (uint8_t i = 0; i < num_replicas; ++i) {
      if (replicas[i].node == node) return &replicas[i];
    }
    return nullptr;
  }
  const ReplicaSlot* SlotOn(NodeId node) const { return const_cast<Object*>(this)->SlotOn(node); }
  // Removes the slot on `node` (which must exist), keeping the others packed at the front.
  void DropSlot(NodeId node);
};

struct LruList {
  Object* head = nullptr;  // least recently used
  Object* tail = nullptr;  // most recently used
};

struct TierState {
  ExtentAllocator alloc;  // capacity 0: the node has no such tier
  uint64_t high_bytes = 0;
  uint64_t low_bytes = 0;
  LruList lru;
  uint64_t replicas = 0;  // slots of any state placed here
};

struct NodeState {
  std::array<TierState, kNumTiers> tiers;
  TierState& tier(Tier t) { return tiers[static_cast<int>(t)]; }
  const TierState& tier(Tier t) const { return tiers[static_cast<int>(t)]; }
};

struct PendingPut {
  Object* object = nullptr;
  Nanos deadline = 0;
};

struct Pin {
  Nanos expires_at = 0;
  std::vector<Object*> objects;
};

using ObjectMap = std::unordered_map<ObjectKey, Object>;

class MasterState::Impl {
 public:
  Impl(const MasterConfig& config, const Clock& clock) : config_(config), clock_(clock) {}

  // All of these expect mu_ held.
  Status AddNode(const NodeSpec& spec);
  Status RemoveNode(NodeId node);
  std::vector<NodeId> LiveNodes() const;
  Result<PutTicket> PutStart(const ObjectKey& key, uint64_t size, const PutOptions& options);
  Status PutCommit(PutId put, uint64_t checksum);
  Status PutAbort(PutId put);
  GetResult Get(std::span<const ObjectKey> keys);
  Status Unpin(PinId pin);
  Result<Nanos> RenewPin(PinId pin);
  ExistsResult Exists(std::span<const ObjectKey> keys) const;
  size_t Remove(std::span<const ObjectKey> keys);
  TickStats Tick();
  Result<RebuildOutcome> RebuildFromReports(NodeId node, std::span<const ReportedReplica> reports);
  void HoldEviction(Nanos until) { hold_eviction_until_ = std::max(hold_eviction_until_, until); }
  Result<TierUsage> Usage(NodeId node, Tier tier) const;
  MasterStats Stats() const;
  Status CheckConsistency() const;

  // One plain mutex, not a reader-writer lock: glibc's rwlock prefers readers, so a steady stream
  // of Exists probes would starve puts and Ticks (seen in threads_test); an Exists of 1,000 keys
  // holds it for tens of microseconds.
  mutable std::mutex mu_;

 private:
  uint64_t Aligned(uint64_t size) const {
    return (size + config_.alignment - 1) & ~(config_.alignment - 1);
  }
  TierState& TierOf(NodeId node, Tier tier);

  // LRU list of (node, tier) through the objects' slots on `node`.
  static void LruAppend(LruList& list, NodeId node, Object* o);
  static void LruUnlink(LruList& list, NodeId node, Object* o);
  // Moves every replica of a committed object to the most-recent end of its list.
  void Touch(Object* o);

  // Returns the space of every replica of `o` (unlinking committed ones from their LRU lists)
  // and erases it from objects_. Precondition: o->pins == 0 and o is in objects_.
  void EraseObject(Object* o);
  // Moves a pinned object out of sight into hidden_, keeping its space (see master_impl.h top).
  void HideObject(Object* o);
  // Drops one pin reference; frees a hidden object at its last one.
  void ReleasePinRef(Object* o);
  // Drops o's replica on `node`: unlinks it if committed and returns its space if `free_space`
  // (false when the whole node is going away).
  void DropReplica(Object* o, NodeId node, bool free_space);
  void ErasePut(uint64_t put_id);
  void ErasePin(uint64_t pin_id);

  // Evicts the least recently used unpinned committed replica on (node, tier); false if none.
  bool EvictOne(NodeId node, Tier tier);
  // Evicts down to the low watermark if used is above the high watermark; returns evictions.
  size_t EvictToWatermark(NodeId node, Tier tier);

  const MasterConfig config_;
  const Clock& clock_;

  std::unordered_map<NodeId, NodeState> nodes_;  // live nodes only
  ObjectMap objects_;                            // pending and committed objects
  std::unordered_map<Object*, ObjectMap::node_type> hidden_;
  std::unordered_map<uint64_t, PendingPut> puts_;
  std::set<std::pair<Nanos, uint64_t>> put_deadlines_;  // (deadline, put id)
  std::unordered_map<uint64_t, Pin> pins_;
  std::set<std::pair<Nanos, uint64_t>> pin_expiry_;  // (expires_at, pin id)
  Nanos hold_eviction_until_ = 0;                    // HoldEviction
  uint64_t next_put_id_ = 1;
  uint64_t next_pin_id_ = 1;
  uint64_t evicted_replicas_ = 0;
  uint64_t expired_puts_ = 0;
  uint64_t expired_pins_ = 0;
};

}  // namespace dualpath::store
