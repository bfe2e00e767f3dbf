// The on-media layout of a pool region (docs/formats/pool_region.md).
//
// Every structure here lives in memory shared by many processes (and, in the non-coherent model,
// many hosts), so: fixed-width fields only, no pointers (every reference is a byte offset from the
// region base), and sizeof/offsetof pinned by static_assert so that a compiler or a refactor can
// never silently change the format. Fields that are read without the metadata lock are accessed
// through std::atomic_ref (plain loads/stores on x86; see pool.cc for why no read-modify-write
// atomics are ever used on region memory).
//
// Thread safety: these are plain structs; the rules for touching them are in pool.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dualpath/common/status.h"
#include "dualpath/pool/pool.h"

namespace dualpath::pool::internal {

inline constexpr uint64_t kMagic = 0x31304C4F4F505044ull;  // "DPPOOL01" little-endian
inline constexpr uint32_t kVersion = 3;  // 2: owner-bound roots; 3: fail-over lock manager
inline constexpr uint64_t kCacheLine = 64;
inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint32_t kInitReady = 0x52454459;  // "READ"Y: header fully written

// Region header, at offset 0. Immutable after creation except the lines marked mutable.
struct RegionHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t region_bytes;
  uint32_t model;       // MemoryModel
  uint32_t init_state;  // kInitReady once the region is formatted (written last)
  uint64_t chunk_bytes;
  uint64_t num_chunks;
  uint64_t index_capacity;  // power of two
  uint32_t max_procs;
  uint32_t pin_records;  // per process, power of two
  uint32_t max_roots;
  uint32_t num_nodes;
  int64_t lease_ns;
  uint64_t procs_off;
  uint64_t pins_off;
  uint64_t bitmap_off;
  uint64_t chunks_off;
  uint64_t index_off;
  uint64_t roots_off;
  uint64_t locks_off;
  uint64_t data_off;
  uint64_t reserved0[5];
  // Mutable (under the metadata lock): the LRU clock and counters, one cache line.
  alignas(64) uint64_t lru_clock;
  uint64_t evictions;
  uint64_t sweeps;
  uint64_t reclaimed_procs;
  uint64_t reclaimed_roots;  // owner-bound roots dropped because their owner was gone
  uint64_t reserved1[3];
};
static_assert(sizeof(RegionHeader) == 256);
static_assert(offsetof(RegionHeader, magic) == 0);
static_assert(offsetof(RegionHeader, version) == 8);
static_assert(offsetof(RegionHeader, region_bytes) == 16);
static_assert(offsetof(RegionHeader, model) == 24);
static_assert(offsetof(RegionHeader, init_state) == 28);
static_assert(offsetof(RegionHeader, chunk_bytes) == 32);
static_assert(offsetof(RegionHeader, lease_ns) == 72);
static_assert(offsetof(RegionHeader, procs_off) == 80);
static_assert(offsetof(RegionHeader, data_off) == 136);
static_assert(offsetof(RegionHeader, lru_clock) == 192);

// A process attached to the region. Owner identity = (slot index, generation); the generation is
// bumped every time the slot is (re)claimed, so a stale reference to a dead owner never matches a
// new one.
enum ProcState : uint32_t { kProcFree = 0, kProcLive = 1 };
struct ProcSlot {
  uint32_t state;
  uint32_t generation;
  int32_t pid;
  uint32_t node;
  uint64_t start_time;  // /proc/<pid>/stat field 22: with pid, unique per boot
  uint64_t host_id;     // hash of /proc/sys/kernel/random/boot_id (or an override)
  int64_t lease_expiry_ns;
  uint64_t reserved[3];
};
static_assert(sizeof(ProcSlot) == 64);
static_assert(offsetof(ProcSlot, lease_expiry_ns) == 32);

// One pin held by a process: the truth from which entry pin counts are rebuilt after a crash.
struct PinRecord {
  uint32_t entry_plus1;  // 0 = empty record
  uint32_t count;
};
static_assert(sizeof(PinRecord) == 8);

// Chunk descriptor. A chunk is either free, a slab carved into up to 64 equal slots, or part of a
// run of contiguous chunks holding one large block or a root object.
enum ChunkState : uint32_t { kChunkFree = 0, kChunkSlab = 1, kChunkRunHead = 2, kChunkRunTail = 3 };
inline constexpr uint32_t kNoOwner = 0;
struct ChunkDesc {
  uint32_t state;
  uint32_t owner_plus1;  // heap (process slot + 1) carving this slab; 0 = orphaned
  uint32_t owner_gen;
  uint32_t slot_shift;  // slab: slot size = 1 << slot_shift
  uint64_t used_bits;   // slab: bit i set = slot i allocated
  uint32_t run_len;     // run head: number of chunks
  uint32_t reserved;
};
static_assert(sizeof(ChunkDesc) == 32);
static_assert(offsetof(ChunkDesc, used_bits) == 16);

// Index entry: two cache lines. Line 0 is everything a lock-free reader and an eviction scan
// need (tag, hash, location, pins, LRU tick), so each of them flushes one line per entry in the
// non-coherent model; line 1 is bookkeeping read only by the lock holder.
enum EntryState : uint64_t { kEmpty = 0, kWriting = 1, kReady = 2, kTombstone = 3 };
inline uint64_t TagState(uint64_t tag) { return tag & 0xff; }
inline uint64_t TagSeq(uint64_t tag) { return tag >> 8; }
inline uint64_t MakeTag(uint64_t seq, uint64_t state) { return (seq << 8) | state; }
struct IndexEntry {
  uint64_t tag;  // (seq << 8) | EntryState; seq changes on every transition (seqlock)
  uint64_t hash[4];
  uint64_t data_off;
  uint32_t length;  // blocks are < 4 GiB
  uint32_t pins;
  uint64_t last_access;  // LRU tick
  // line 1
  uint64_t user_tag;
  uint32_t writer_plus1;
  uint32_t writer_gen;
  uint64_t reserved[6];
};
static_assert(sizeof(IndexEntry) == 128);
static_assert(offsetof(IndexEntry, hash) == 8);
static_assert(offsetof(IndexEntry, data_off) == 40);
static_assert(offsetof(IndexEntry, length) == 48);
static_assert(offsetof(IndexEntry, pins) == 52);
static_assert(offsetof(IndexEntry, last_access) == 56);
static_assert(offsetof(IndexEntry, user_tag) == 64);
inline constexpr uint64_t kMaxBlockBytes = 0xFFFFFFFFull;

// Named root object (TraCT's object store): name -> (offset, length). A persistent root has
// owner_plus1 == 0 (regions formatted before owner-bound roots existed read as persistent: the
// field was reserved and zero); an owner-bound root names its creator (process slot + 1,
// generation) and is dropped by the recovery sweep once that owner is no longer live. The owner
// is written before the state's commit store, so a root is never READY without its owner.
inline constexpr size_t kRootNameBytes = 64;
struct RootEntry {
  uint64_t state;  // 0 empty, 2 ready
  char name[kRootNameBytes];
  uint64_t data_off;
  uint64_t length;
  uint32_t owner_plus1;  // 0: persistent; else the owning process slot + 1
  uint32_t owner_gen;    // the owner's slot generation
  uint64_t reserved[4];
};
static_assert(sizeof(RootEntry) == 128);
static_assert(offsetof(RootEntry, data_off) == 72);
static_assert(offsetof(RootEntry, owner_plus1) == 88);
static_assert(offsetof(RootEntry, owner_gen) == 92);

// Lock area. Coherent model: a process-shared robust pthread mutex. Non-coherent model: TraCT's
// global slot array with a fail-over lock manager (lock.cc). Every line below has ONE kind of
// writer, because on memory without coherence a clflush writes back a whole line, stale words
// included: two hosts writing different words of one line would undo each other.
//  - LockControl: `recovery_needed` (set by whoever finds a dead holder, cleared by the holder
//    after the sweep);
//  - ManagerClaim: written by a process claiming the manager role (`epoch` identifies the
//    claim: (counter << 16) | node, never 0 once claimed) and by that manager resigning;
//  - ManagerBeat: bumped by the current manager every lease/8, so candidates see it live;
//  - RequestSlot[node]: written only by the node's local-lock holder (its request number and
//    whether it is active);
//  - GrantSlot[node]: written only by a manager: the request number it granted and its epoch.
inline constexpr uint64_t kRequestActive = 1;  // RequestSlot::request = (seq << 1) | active
inline constexpr uint64_t kGrantSeqBits = 24;  // GrantSlot::grant = (epoch << 24) | (seq & mask)
inline constexpr uint64_t kGrantSeqMask = (uint64_t{1} << kGrantSeqBits) - 1;
inline constexpr uint64_t kEpochNodeBits = 16;  // ManagerClaim::epoch = (counter << 16) | node
struct RequestSlot {
  uint64_t request;
  uint32_t holder_plus1;  // process slot of the waiter/holder (0 before it registered)
  uint32_t holder_gen;
  uint64_t reserved[6];
};
static_assert(sizeof(RequestSlot) == 64);
struct GrantSlot {
  uint64_t grant;  // 0: never granted
  uint64_t reserved[7];
};
static_assert(sizeof(GrantSlot) == 64);
struct LockControl {
  uint64_t recovery_needed;  // set when a dead holder's grant is given back or revoked
  uint64_t reserved[7];
};
static_assert(sizeof(LockControl) == 64);
struct ManagerClaim {
  uint64_t epoch;  // 0: no manager ever claimed the role
  uint32_t node;
  int32_t pid;
  uint32_t resigned;  // 1: the manager left cleanly (closed); candidates claim at once
  uint32_t reserved0;
  uint64_t reserved[5];
};
static_assert(sizeof(ManagerClaim) == 64);
struct ManagerBeat {
  uint64_t beat;
  uint64_t reserved[7];
};
static_assert(sizeof(ManagerBeat) == 64);
// Bytes of the non-coherent lock area after the mutex area.
inline uint64_t LockAreaBytes(uint32_t num_nodes) {
  return sizeof(LockControl) + sizeof(ManagerClaim) + sizeof(ManagerBeat) +
         uint64_t{num_nodes} * (sizeof(RequestSlot) + sizeof(GrantSlot));
}
inline constexpr uint64_t kMutexAreaBytes = 64;

// Offsets of every area, computed from the geometry (the header stores them; Open recomputes and
// compares, so a corrupted header is caught before anything is written).
struct Layout {
  uint64_t procs_off, pins_off, bitmap_off, chunks_off, index_off, roots_off, locks_off, data_off;
  uint64_t num_chunks;
  uint64_t index_capacity;
};

// The layout for exactly `chunks` chunks and an index of `index_capacity` entries (no checks).
Layout LayoutFor(const Geometry& g, uint64_t chunks, uint64_t index_capacity);
// Lays out a region of `g.region_bytes`. kPoolTooSmall when not even one chunk fits.
Result<Layout> ComputeLayout(const Geometry& g);
// Checks a header read from a file of `file_bytes` (before anything is mapped writable).
Status ValidateHeader(const RegionHeader& h, uint64_t file_bytes, const std::string& path);
// The geometry a header describes.
Geometry GeometryOf(const RegionHeader& h);

// Single loads/stores of region words. Only plain loads and stores are ever used on region memory
// (never a LOCK-prefixed read-modify-write): CXL Type-3 memory shared across hosts has no
// cross-host atomics, so the lock, not the instruction, provides exclusion. atomic_ref makes the
// accesses single-copy atomic and visible to ThreadSanitizer.
template <typename T>
inline T Ld(const T& x) {
  return std::atomic_ref<T>(const_cast<T&>(x)).load(std::memory_order_acquire);
}
template <typename T>
inline void St(T& x, T v) {
  std::atomic_ref<T>(x).store(v, std::memory_order_release);
}

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline uint64_t NextPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace dualpath::pool::internal
