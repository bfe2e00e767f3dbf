// MasterState's private data structures (see dualpath/store/master_state.h for the contract).
//
// Memory per object is what bounds a master (issue 27: Mooncake's users hit master OOM at tens of
// millions of keys), so an object is one 80-byte record in a slab, named by its 32-bit index, and
// nothing else is allocated per object:
//   - objects live in chunks of kChunkObjects records that never move; a freed record goes on a
//     free list and is reused;
//   - ObjectTable (object_table.h) maps a key to its index: 8 bytes a slot, at most 3/4 full;
//   - the key's 32-byte hash is in the record, its model fingerprint as a 32-bit index into a
//     small table of the fingerprints in use (counted, dropped with their last object);
//   - the first replica's slot is in the record; the second and third (rare: replicas > 1) are in
//     a side slab of slot pairs, named by `extra`;
//   - a pending object's put id shares the word of the committed checksum (a put id is needed
//     only before the commit, the checksum only after it).
// A pinned object that is removed (or loses its last node) leaves the table but keeps its record
// (in hidden_) until its last unpin frees its space.
//
// Each (node, tier) keeps a doubly linked LRU list of the committed objects with a replica there,
// threaded through the replica slots themselves (ReplicaSlot::lru_prev/lru_next, object indices):
// the object's replicas are on distinct nodes, so (object, node) names one slot, and no allocation
// is made per list entry.
//
// Ranges this layout imposes, checked where values enter: offsets and sizes below 2^48 bytes (a
// node tier of at most 256 TiB), fewer than 2^32 - 1 objects and distinct model fingerprints.
//
// Thread safety: MasterState::Impl has none of its own; every MasterState method takes mu_.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/store/master_state.h"
#include "dualpath/store/types.h"
#include "store/extent_allocator.h"
#include "store/huge_array.h"
#include "store/object_table.h"

namespace dualpath::store {

// An object's record index (and the LRU links' type); kNoObject: none.
using ObjIndex = uint32_t;
inline constexpr ObjIndex kNoObject = ObjectTable::kNone;

// Offsets and sizes fit 48 bits (a tier of at most 256 TiB).
inline constexpr uint64_t kMaxTierBytes = uint64_t{1} << 48;

enum class ObjectState : uint8_t {
  kFree,       // a record on the free list
  kPending,    // reserved by PutStart, not visible
  kCommitted,  // visible; its replicas are in their LRU lists
  kHidden,     // removed or orphaned while pinned: in hidden_, space held until the last unpin
};

// One replica: 20 bytes, 4-byte aligned (the 48-bit offset in two words), so that slot 0 packs
// into the object record.
struct ReplicaSlot {
  uint32_t node = 0;
  // Committed objects only: neighbours in the LRU list of (node, tier); head is least recent.
  ObjIndex lru_prev = kNoObject;
  ObjIndex lru_next = kNoObject;
  uint32_t offset_lo = 0;
  uint16_t offset_hi = 0;
  Tier tier = Tier::kDram;

  uint64_t offset() const { return (uint64_t{offset_hi} << 32) | offset_lo; }
  void set_offset(uint64_t off) {
    offset_lo = static_cast<uint32_t>(off);
    offset_hi = static_cast<uint16_t>(off >> 32);
  }
  NodeId node_id() const { return NodeId(node); }
};
static_assert(sizeof(ReplicaSlot) == 20);

// Field order (issue 27, `exists` hits): a lookup reads only the hash, the state and the model,
// so they come first, in bytes [0, kLookupBytes). Records are 80 bytes, so they start at 0, 16,
// 32 or 48 bytes into a cache line in turn: the first kLookupBytes (44) of half of them lie in
// one line, where the whole record always spans two. A batch lookup (Impl::Exists) prefetches
// just those bytes, so a hit loads 1.5 lines of record on average instead of 2.
struct Object {
  kv::BlockHash hash;
  uint64_t size : 48 = 0;  // as the writer gave it (space taken is Aligned(size))
  uint64_t state : 8 = 0;  // ObjectState
  uint64_t num_replicas : 8 = 0;
  uint32_t model = 0;  // index into Impl::models_
  // ---- kLookupBytes end here ----
  uint32_t pins = 0;  // live pin references (a key twice in one Get counts twice)
  // kPending: the put id; kCommitted and kHidden: the checksum the writer committed.
  uint64_t put_or_checksum = 0;
  uint32_t extra = kNoObject;  // replicas 2 and 3 (Impl::extras_); the free list's link when free
  ReplicaSlot slot0;

  ObjectState st() const { return static_cast<ObjectState>(state); }
  void set_state(ObjectState s) { state = static_cast<uint8_t>(s); }
};
static_assert(sizeof(Object) == 80, "the master's per-object record (docs/store.md: memory)");
// The bytes a lookup compares: hash, the word holding size and state, and model.
inline constexpr size_t kLookupBytes = offsetof(Object, model) + sizeof(uint32_t);
static_assert(kLookupBytes == 44, "Exists' prefetch covers hash, state and model");

struct LruList {
  ObjIndex head = kNoObject;  // least recently used
  ObjIndex tail = kNoObject;  // most recently used
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
  ObjIndex object = kNoObject;
  Nanos deadline = 0;
};

struct Pin {
  Nanos expires_at = 0;
  std::vector<ObjIndex> objects;
};

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

  // ---- the object slab, the key index and the replica slots (master_objects.cc) ----
  Object& Obj(ObjIndex i) { return chunks_[i / kChunkObjects][i % kChunkObjects]; }
  const Object& Obj(ObjIndex i) const { return chunks_[i / kChunkObjects][i % kChunkObjects]; }
  ObjectKey KeyOf(ObjIndex i) const;
  // The table's hash of a key / of an object's key (std::hash<ObjectKey>).
  static uint64_t HashOf(const ObjectKey& key) { return std::hash<ObjectKey>{}(key); }
  uint64_t HashOfObject(ObjIndex i) const;
  // The pending or committed object of `key` (never a hidden one); kNoObject if none.
  ObjIndex Find(const ObjectKey& key) const;
  // A new record for `key` (absent), indexed, in state kPending with no replica.
  ObjIndex NewObject(const ObjectKey& key);
  // Takes the object out of the key index (it stays allocated: hidden).
  void Unindex(ObjIndex i);
  // Frees the record (it must have no replica left, and be out of the index unless `indexed`).
  void FreeObject(ObjIndex i, bool indexed);
  // Replica r (0 .. num_replicas - 1) of an object.
  ReplicaSlot& SlotAt(ObjIndex i, int r);
  const ReplicaSlot& SlotAt(ObjIndex i, int r) const;
  ReplicaSlot* SlotOn(ObjIndex i, NodeId node);
  // Appends a replica slot (allocating the out-of-line pair for the second).
  ReplicaSlot& AddSlot(ObjIndex i, NodeId node, Tier tier, uint64_t offset);
  // Removes the slot on `node` (which must exist), keeping the others packed at the front.
  void DropSlot(ObjIndex i, NodeId node);

  // LRU list of (node, tier) through the objects' slots on `node`.
  void LruAppend(LruList& list, NodeId node, ObjIndex o);
  void LruUnlink(LruList& list, NodeId node, ObjIndex o);
  // Moves every replica of a committed object to the most-recent end of its list.
  void Touch(ObjIndex o);

  // Returns the space of every replica of `o` (unlinking committed ones from their LRU lists)
  // and frees it. Precondition: no pins, and o is in the key index.
  void EraseObject(ObjIndex o);
  // Moves a pinned object out of sight into hidden_, keeping its space (see master_impl.h top).
  void HideObject(ObjIndex o);
  // Drops one pin reference; frees a hidden object at its last one.
  void ReleasePinRef(ObjIndex o);
  // Drops o's replica on `node`: unlinks it if committed and returns its space if `free_space`
  // (false when the whole node is going away).
  void DropReplica(ObjIndex o, NodeId node, bool free_space);
  void ErasePut(uint64_t put_id);
  void ErasePin(uint64_t pin_id);

  // Evicts the least recently used unpinned committed replica on (node, tier); false if none.
  bool EvictOne(NodeId node, Tier tier);
  // Evicts down to the low watermark if used is above the high watermark; returns evictions.
  size_t EvictToWatermark(NodeId node, Tier tier);

  // 10 MiB of records per chunk: a whole number of 2 MiB pages, so that a chunk is a mapping of
  // its own, all of it on huge pages (huge_array.h); 2^16 records (5 MiB) left a part of every
  // chunk on small pages.
  static constexpr size_t kChunkObjects = size_t{1} << 17;
  static_assert(kChunkObjects * sizeof(Object) % kHugePageBytes == 0,
                "a slab chunk is whole 2 MiB pages (huge_array.h)");

  const MasterConfig config_;
  const Clock& clock_;

  std::unordered_map<NodeId, NodeState> nodes_;  // live nodes only

  // The slab: records by index, the free list's head, how many records are allocated.
  std::vector<HugeArray<Object>> chunks_;  // huge pages where the kernel offers them
  ObjIndex free_head_ = kNoObject;
  size_t allocated_ = 0;  // records ever handed out (the slab's high-water mark)
  ObjectTable index_;     // pending and committed objects by key
  // Replicas 2 and 3 of objects with more than one; a free pair's first node is its free link.
  std::vector<std::array<ReplicaSlot, kMaxReplicas - 1>> extras_;
  uint32_t extras_free_ = kNoObject;
  // Model fingerprints in use: (fingerprint, objects), indexed by Object::model; a slot whose
  // count drops to 0 is reused.
  std::vector<std::pair<uint64_t, uint64_t>> models_;
  std::unordered_map<uint64_t, uint32_t> model_index_;
  std::vector<uint32_t> models_free_;

  std::unordered_set<ObjIndex> hidden_;
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
