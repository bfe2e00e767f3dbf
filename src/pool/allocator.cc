// Allocator (TraCT §3.5): a global chunk allocator (bitmap in the region) plus per-process heaps
// that carve chunks into slots. A heap keeps the list of chunks it carves in DRAM, so an
// allocation touches one chunk descriptor line and not the global bitmap; the bitmap is touched
// once per chunk. A slab chunk has at most 64 equal slots (one bitmap word in its descriptor), so
// a block of any size up to a chunk costs one descriptor update; larger blocks and root objects
// take runs of contiguous chunks.
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "dualpath/common/check.h"
#include "pool/fault.h"
#include "pool/pool_impl.h"

namespace dualpath::pool {

using namespace internal;  // NOLINT(google-build-using-namespace): the region structs

namespace {
constexpr uint32_t kMaxSlotsLog2 = 6;  // 64 slots per chunk
}  // namespace

uint32_t PoolImpl::SlotShift(uint64_t size) const {
  const uint32_t chunk_shift = static_cast<uint32_t>(std::countr_zero(chunk_bytes_));
  const uint32_t need = static_cast<uint32_t>(std::bit_width(std::max<uint64_t>(size, 1) - 1));
  return std::max(need, chunk_shift - kMaxSlotsLog2);
}

void PoolImpl::SetBit(uint64_t c, bool on) {
  uint64_t* w = Bitmap() + c / 64;
  sync_.Fresh(w, 8);
  const uint64_t bit = uint64_t{1} << (c % 64);
  St(*w, on ? (Ld(*w) | bit) : (Ld(*w) & ~bit));
  sync_.Publish(w, 8);
}

uint64_t PoolImpl::FreeChunksLocked() const {
  uint64_t used = 0;
  const uint64_t words = (num_chunks_ + 63) / 64;
  sync_.Fresh(Bitmap(), words * 8);
  for (uint64_t i = 0; i < words; ++i) used += std::popcount(Ld(Bitmap()[i]));
  return num_chunks_ - used;
}

Result<uint64_t> PoolImpl::AllocateRunLocked(uint64_t k) {
  // First fit over the bitmap, starting at the next-fit hint.
  const uint64_t words = (num_chunks_ + 63) / 64;
  sync_.Fresh(Bitmap(), words * 8);
  for (uint64_t n = 0; n < num_chunks_; ++n) {
    const uint64_t start = (next_fit_ + n) % num_chunks_;
    if (start + k > num_chunks_) continue;
    bool ok = true;
    for (uint64_t c = start; c < start + k && ok; ++c) {
      ok = (Ld(Bitmap()[c / 64]) & (uint64_t{1} << (c % 64))) == 0;
    }
    if (!ok) continue;
    // Descriptors first, then bits: a crash in between leaves descriptors the sweep rebuilds.
    for (uint64_t c = start; c < start + k; ++c) {
      ChunkDesc* d = Chunk(c);
      St(d->state, c == start ? uint32_t{kChunkRunHead} : uint32_t{kChunkRunTail});
      St(d->owner_plus1, kNoOwner);
      St(d->run_len, c == start ? static_cast<uint32_t>(k) : 0u);
      St(d->used_bits, uint64_t{0});
      sync_.Publish(d);
    }
    FaultPoint("alloc.descs_written");
    for (uint64_t c = start; c < start + k; ++c) SetBit(c, true);
    next_fit_ = (start + k) % num_chunks_;
    return data_off_ + start * chunk_bytes_;
  }
  return Status(Code::kPoolFull, "no run of free chunks");
}

Result<uint64_t> PoolImpl::AllocateLocked(uint64_t size) {
  if (size > chunk_bytes_) {
    return AllocateRunLocked((size + chunk_bytes_ - 1) / chunk_bytes_);
  }
  const uint32_t shift = SlotShift(size);
  const uint64_t slots = chunk_bytes_ >> shift;
  const uint64_t full = slots == 64 ? ~uint64_t{0} : (uint64_t{1} << slots) - 1;
  auto take = [&](uint64_t c) -> std::optional<uint64_t> {
    ChunkDesc* d = Chunk(c);
    const uint64_t used = Ld(d->used_bits);
    if ((used & full) == full) return std::nullopt;
    const uint64_t slot = static_cast<uint64_t>(std::countr_one(used));
    St(d->used_bits, used | (uint64_t{1} << slot));
    sync_.Publish(d);
    return data_off_ + c * chunk_bytes_ + (slot << shift);
  };
  // 1. This process's heap.
  for (uint32_t c : heap_[shift]) {
    ChunkDesc* d = Chunk(c);
    sync_.Fresh(d);
    if (Ld(d->state) != kChunkSlab || Ld(d->slot_shift) != shift ||
        Ld(d->owner_plus1) != self_ + 1 || Ld(d->owner_gen) != self_gen_) {
      continue;  // released or taken over since; pruned below
    }
    if (auto off = take(c)) return *off;
  }
  std::erase_if(heap_[shift], [&](uint32_t c) {
    const ChunkDesc* d = Chunk(c);
    return Ld(d->state) != kChunkSlab || Ld(d->owner_plus1) != self_ + 1 ||
           Ld(d->owner_gen) != self_gen_;
  });
  // 2. A new chunk from the global bitmap.
  Result<uint64_t> run = AllocateRunLocked(1);
  if (run.ok()) {
    const uint64_t c = (*run - data_off_) / chunk_bytes_;
    ChunkDesc* d = Chunk(c);
    St(d->state, uint32_t{kChunkSlab});
    St(d->owner_plus1, self_ + 1);
    St(d->owner_gen, self_gen_);
    St(d->slot_shift, shift);
    St(d->run_len, 0u);
    St(d->used_bits, uint64_t{0});
    sync_.Publish(d);
    heap_[shift].push_back(static_cast<uint32_t>(c));
    return *take(c);
  }
  // 3. A free slot in any chunk of this size (another heap's, or orphaned by a dead process):
  // evicting someone else's block must be able to make room for us.
  for (uint64_t c = 0; c < num_chunks_; ++c) {
    ChunkDesc* d = Chunk(c);
    sync_.Fresh(d);
    if (Ld(d->state) == kChunkSlab && Ld(d->slot_shift) == shift) {
      if (auto off = take(c)) return *off;
    }
  }
  return Status(Code::kPoolFull, "no free slot or chunk");
}

void PoolImpl::FreeLocked(uint64_t off, uint64_t size) {
  DUALPATH_CHECK(off >= data_off_ && off < data_off_ + num_chunks_ * chunk_bytes_,
                 "pool: freeing an offset outside the data area");
  const uint64_t c = (off - data_off_) / chunk_bytes_;
  ChunkDesc* d = Chunk(c);
  sync_.Fresh(d);
  const uint32_t state = Ld(d->state);
  if (state == kChunkSlab) {
    const uint32_t shift = Ld(d->slot_shift);
    DUALPATH_CHECK(shift == SlotShift(size), "pool: freed size does not match the slab");
    const uint64_t bit = uint64_t{1} << ((off - data_off_ - c * chunk_bytes_) >> shift);
    const uint64_t used = Ld(d->used_bits);
    DUALPATH_CHECK((used & bit) != 0, "pool: double free of a slot");
    St(d->used_bits, used & ~bit);
    FaultPoint("free.slot_cleared");
    if ((used & ~bit) == 0) {
      // Empty chunks go back to the global allocator so capacity flows between sizes.
      St(d->state, uint32_t{kChunkFree});
      St(d->owner_plus1, kNoOwner);
      sync_.Publish(d);
      SetBit(c, false);
    } else {
      sync_.Publish(d);
    }
    return;
  }
  DUALPATH_CHECK(state == kChunkRunHead, "pool: freeing an offset that is not allocated");
  const uint64_t k = Ld(d->run_len);
  for (uint64_t i = c; i < c + k; ++i) {
    St(Chunk(i)->state, uint32_t{kChunkFree});
    St(Chunk(i)->run_len, 0u);
    sync_.Publish(Chunk(i));
  }
  for (uint64_t i = c; i < c + k; ++i) SetBit(i, false);
}

Result<uint64_t> PoolImpl::AllocateOrEvictLocked(uint64_t size) {
  bool swept = false;
  for (;;) {
    Result<uint64_t> r = AllocateLocked(size);
    if (r.ok() || r.status().code() != Code::kPoolFull) return r;
    // Capacity held by dead processes comes back before anything live is evicted.
    if (!swept && AnyProcGone()) {
      SweepLocked();
      swept = true;
      continue;
    }
    if (!EvictOneLocked()) {
      return Status(
          Code::kPoolFull,
          fmt::format("no space for {} bytes: every block is pinned or being written", size));
    }
  }
}

}  // namespace dualpath::pool
