// PoolImpl: the attachment of one process to a region (private; see dualpath/pool/pool.h).
//
// Concurrency rules for region memory (all of them, both memory models):
//  - Every mutation of shared metadata (index entries, chunk descriptors, bitmap, pins, roots,
//    other processes' slots) happens while holding the metadata lock (`Locked`), with plain
//    stores (St) followed, in the non-coherent model, by a clflush of the written lines
//    (sync_.Publish). Reads under the lock first drop possibly stale lines (sync_.Fresh).
//  - Lock-free readers (Contains, LongestPrefix) read an index entry's first line as a seqlock:
//    tag, hash, tag again.
//  - A process writes its own slot's lease without the lock (a single word).
//  - Payload bytes are written only between Reserve and Publish, by the reserving process, and
//    read only while pinned; READY is the visibility boundary.
//
// The derived state - chunk slot bitmaps, the chunk bitmap, entry pin counts - can always be
// rebuilt from the truth (index entries, roots and their owners, live processes' pin records),
// which is what the recovery sweep does after a holder died mid-update (recovery.cc).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/pool/pool.h"
#include "pool/flush.h"
#include "pool/layout.h"
#include "pool/lock.h"
#include "pool/region.h"

namespace dualpath::pool {

class PoolImpl {
 public:
  static Result<std::unique_ptr<PoolImpl>> Open(const std::string& path, OpenOptions options);
  ~PoolImpl();

  Result<WriteHandle> Reserve(const BlockHash& hash, uint64_t size, uint64_t user_tag);
  // user_tag, when given, replaces the tag given at Reserve (a writer that checksums the payload
  // while it copies it in knows the tag only afterwards).
  Status Publish(WriteHandle& handle, bool payload_streamed,
                 std::optional<uint64_t> user_tag = std::nullopt);
  Status Abort(WriteHandle& handle);
  Status Put(const BlockHash& hash, std::span<const std::byte> payload, uint64_t user_tag);
  bool Contains(const BlockHash& hash) const;
  size_t LongestPrefix(std::span<const BlockHash> chain) const;
  Result<PinnedBlock> Pin(const BlockHash& hash);
  Status Unpin(PinnedBlock& block);
  Result<uint64_t> Get(const BlockHash& hash, std::span<std::byte> out, uint64_t* user_tag);
  Status Delete(const BlockHash& hash);
  Result<size_t> Evict(size_t n);
  Result<std::span<std::byte>> CreateRoot(std::string_view name, uint64_t size,
                                          RootLifetime lifetime);
  Result<std::span<std::byte>> GetRoot(std::string_view name);
  Status DestroyRoot(std::string_view name);
  Status Tick();
  Status Recover();
  PoolStats Stats();
  const Geometry& geometry() const { return geometry_; }
  uint64_t OffsetOf(const void* p) const {
    return static_cast<uint64_t>(static_cast<const uint8_t*>(p) - base_);
  }
  void* PointerAt(uint64_t off) const { return base_ + off; }

 private:
  friend class Locked;
  PoolImpl() : sync_(false) {}

  // --- region accessors ---
  internal::RegionHeader* H() const { return reinterpret_cast<internal::RegionHeader*>(base_); }
  internal::ProcSlot* Proc(uint32_t i) const {
    return reinterpret_cast<internal::ProcSlot*>(base_ + H()->procs_off) + i;
  }
  internal::PinRecord* Pins(uint32_t i) const {
    return reinterpret_cast<internal::PinRecord*>(base_ + H()->pins_off) +
           uint64_t{i} * geometry_.pin_records;
  }
  uint64_t* Bitmap() const { return reinterpret_cast<uint64_t*>(base_ + H()->bitmap_off); }
  internal::ChunkDesc* Chunk(uint64_t c) const {
    return reinterpret_cast<internal::ChunkDesc*>(base_ + H()->chunks_off) + c;
  }
  internal::IndexEntry* Entry(uint64_t i) const {
    return reinterpret_cast<internal::IndexEntry*>(base_ + H()->index_off) + i;
  }
  internal::RootEntry* Root(uint32_t i) const {
    return reinterpret_cast<internal::RootEntry*>(base_ + H()->roots_off) + i;
  }
  uint8_t* ChunkBase(uint64_t c) const { return base_ + data_off_ + c * chunk_bytes_; }

  // --- blocks (pool.cc) ---
  Status CheckBlockSize(uint64_t size) const;
  uint64_t NextTickLocked();
  Result<WriteHandle> ReserveLocked(const BlockHash& hash, uint64_t size, uint64_t user_tag);
  Status PublishLocked(WriteHandle& handle, std::optional<uint64_t> user_tag = std::nullopt);
  void CopyIn(std::byte* dst, std::span<const std::byte> payload) const;

  // --- index (index.cc) ---
  uint64_t Home(const BlockHash& h) const { return h.Prefix64() & (index_cap_ - 1); }
  // Lock-free lookup of a READY entry; returns its index.
  std::optional<uint64_t> FindReadyLockFree(const BlockHash& h) const;
  // Under the lock: the entry holding `h` in state WRITING or READY.
  std::optional<uint64_t> FindLocked(const BlockHash& h) const;
  // Under the lock: a free (EMPTY/TOMBSTONE) slot in h's probe sequence.
  std::optional<uint64_t> FindFreeSlotLocked(const BlockHash& h) const;
  // Under the lock: marks entry i removed (tombstone, or empty when it ends a probe chain) and
  // frees its data.
  void RemoveLocked(uint64_t i);
  bool EvictOneLocked();

  // --- allocator (allocator.cc) ---
  uint32_t SlotShift(uint64_t size) const;
  // Under the lock. kPoolFull if nothing is free (no eviction here).
  Result<uint64_t> AllocateLocked(uint64_t size);
  void FreeLocked(uint64_t off, uint64_t size);
  Result<uint64_t> AllocateRunLocked(uint64_t chunks);
  // Allocates, evicting LRU blocks and reclaiming dead processes' capacity as needed.
  Result<uint64_t> AllocateOrEvictLocked(uint64_t size);
  void SetBit(uint64_t c, bool on);
  uint64_t FreeChunksLocked() const;

  // --- processes and recovery (recovery.cc) ---
  bool IsProcDead(uint32_t i) const;
  bool IsHolderDead(uint32_t proc_plus1, uint32_t gen) const;
  bool AnyProcDead() const;
  bool AnyProcGone() const;
  Status RegisterLocked();
  void UnregisterLocked();
  // The recovery sweep: drop dead processes, their WRITING entries and pins, rebuild derived
  // state. Requires the lock.
  void SweepLocked();
  void RenewLease();
  void BackgroundLoop();
  // Under the lock: a persistent root, or an owner-bound one whose owner is still attached.
  bool RootOwnerLiveLocked(const internal::RootEntry* r) const;
  // Pin records of this process.
  bool AddPinRecordLocked(uint32_t entry, int delta);

  std::unique_ptr<internal::Mapping> mapping_;
  uint8_t* base_ = nullptr;
  Geometry geometry_;
  uint64_t data_off_ = 0, chunk_bytes_ = 0, num_chunks_ = 0, index_cap_ = 0;
  internal::Sync sync_;
  std::unique_ptr<internal::MetaLock> lock_;
  const Clock* clock_ = nullptr;
  OpenOptions options_;
  Nanos lock_timeout_ = 0;  // options_.lock_timeout, or 3 x lease
  uint64_t host_id_ = 0;
  uint64_t start_time_ = 0;
  uint32_t self_ = 0;  // process slot index
  uint32_t self_gen_ = 0;
  bool registered_ = false;
  // Per-process heap: chunks this process carves, by slot shift (DRAM; touched under the lock).
  std::vector<std::vector<uint32_t>> heap_;
  uint64_t next_fit_ = 0;
  // Eviction candidates from the last full index scan, oldest last: (last_access, entry).
  std::vector<std::pair<uint64_t, uint64_t>> lru_candidates_;
  std::thread background_;
  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_stop_ = false;
};

// RAII holder of the metadata lock; runs the recovery sweep when the lock was inherited from a
// dead holder.
// The wait is bounded (lock_timeout): check status() before touching the metadata.
class Locked {
 public:
  explicit Locked(PoolImpl* p);
  ~Locked();
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;
  // kTimeout (naming the lock and the wait) when the lock was not granted; then nothing is held.
  const Status& status() const { return status_; }

 private:
  PoolImpl* p_;
  Status status_;
  bool held_ = false;
};

}  // namespace dualpath::pool
