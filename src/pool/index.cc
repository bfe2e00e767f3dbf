// Prefix index: a fixed-size open-addressing hash table with linear probing (TraCT §4.2). Fixed
// size means no structural changes (no resize, no pointer rewiring), so an update touches one
// entry's lines, which is what makes it cheap to keep visible on non-coherent memory.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include "dualpath/common/check.h"
#include "pool/fault.h"
#include "pool/pool_impl.h"

namespace dualpath::pool {

using namespace internal;  // NOLINT(google-build-using-namespace): the region structs

namespace {

void HashWords(const BlockHash& h, uint64_t w[4]) { std::memcpy(w, h.bytes.data(), 32); }

bool HashEquals(const IndexEntry* e, const uint64_t w[4]) {
  return Ld(e->hash[0]) == w[0] && Ld(e->hash[1]) == w[1] && Ld(e->hash[2]) == w[2] &&
         Ld(e->hash[3]) == w[3];
}

}  // namespace

std::optional<uint64_t> PoolImpl::FindReadyLockFree(const BlockHash& h) const {
  uint64_t w[4];
  HashWords(h, w);
  const uint64_t mask = index_cap_ - 1;
  for (uint64_t n = 0, i = Home(h); n < index_cap_; ++n, i = (i + 1) & mask) {
    const IndexEntry* e = Entry(i);
    sync_.Fresh(e, kCacheLine);  // line 0 only: tag, hash, location
    const uint64_t t1 = Ld(e->tag);
    const uint64_t st = TagState(t1);
    if (st == kEmpty) return std::nullopt;
    if (st != kReady) continue;
    // Seqlock read: the hash loads are acquire loads, so the second tag load cannot move before
    // them; an unchanged tag means the hash was not rewritten in between.
    const bool eq = HashEquals(e, w);
    if (eq && Ld(e->tag) == t1) return i;
  }
  return std::nullopt;
}

std::optional<uint64_t> PoolImpl::FindLocked(const BlockHash& h) const {
  uint64_t w[4];
  HashWords(h, w);
  const uint64_t mask = index_cap_ - 1;
  for (uint64_t n = 0, i = Home(h); n < index_cap_; ++n, i = (i + 1) & mask) {
    const IndexEntry* e = Entry(i);
    sync_.Fresh(e);
    const uint64_t st = TagState(Ld(e->tag));
    if (st == kEmpty) return std::nullopt;
    if ((st == kReady || st == kWriting) && HashEquals(e, w)) return i;
  }
  return std::nullopt;
}

std::optional<uint64_t> PoolImpl::FindFreeSlotLocked(const BlockHash& h) const {
  const uint64_t mask = index_cap_ - 1;
  for (uint64_t n = 0, i = Home(h); n < index_cap_; ++n, i = (i + 1) & mask) {
    const IndexEntry* e = Entry(i);
    sync_.Fresh(e, kCacheLine);
    const uint64_t st = TagState(Ld(e->tag));
    if (st == kEmpty || st == kTombstone) return i;
  }
  return std::nullopt;
}

void PoolImpl::RemoveLocked(uint64_t i) {
  IndexEntry* e = Entry(i);
  sync_.Fresh(e);
  const uint64_t tag = Ld(e->tag);
  const uint64_t off = Ld(e->data_off);
  const uint64_t len = Ld(e->length);
  DUALPATH_CHECK(TagState(tag) == kReady || TagState(tag) == kWriting,
                 "pool: removing an entry that is not live");
  DUALPATH_CHECK(Ld(e->pins) == 0, "pool: removing a pinned entry");
  // Unpublish first (readers stop seeing it), then free the space: a crash in between leaves
  // unreferenced space that the sweep reclaims, never a reference to freed space.
  const uint64_t mask = index_cap_ - 1;
  const IndexEntry* next = Entry((i + 1) & mask);
  sync_.Fresh(next, kCacheLine);
  const bool ends_chain = TagState(Ld(next->tag)) == kEmpty;
  St(e->tag, MakeTag(TagSeq(tag) + 1, ends_chain ? kEmpty : kTombstone));
  St(e->writer_plus1, 0u);
  sync_.Publish(e);
  if (ends_chain) {
    // Tombstones directly before a now-empty slot end no chain either: clear them so probe
    // sequences do not grow without bound under churn.
    for (uint64_t j = (i - 1) & mask; j != i; j = (j - 1) & mask) {
      IndexEntry* p = Entry(j);
      sync_.Fresh(p, kCacheLine);
      const uint64_t pt = Ld(p->tag);
      if (TagState(pt) != kTombstone) break;
      St(p->tag, MakeTag(TagSeq(pt) + 1, kEmpty));
      sync_.Publish(p, kCacheLine);
    }
  }
  FaultPoint("remove.unpublished");
  FreeLocked(off, len);
}

bool PoolImpl::EvictOneLocked() {
  // LRU over unpinned READY entries by their last-access tick (one timestamp per entry instead of
  // a shared linked list whose links every access would rewrite and flush). A full scan of the
  // table keeps the oldest kCandidates in DRAM; later evictions take from that list after
  // re-checking the candidate (still READY, unpinned, not touched since), and rescan when it runs
  // dry. Entries only ever get newer, so the list stays in LRU order; the one approximation is an
  // entry that was pinned during the scan and unpinned since.
  constexpr size_t kCandidates = 64;
  for (int pass = 0; pass < 2; ++pass) {
    while (!lru_candidates_.empty()) {
      const auto [la, i] = lru_candidates_.back();
      lru_candidates_.pop_back();
      IndexEntry* e = Entry(i);
      sync_.Fresh(e);
      if (TagState(Ld(e->tag)) != kReady || Ld(e->pins) != 0 || Ld(e->last_access) != la) {
        continue;
      }
      RemoveLocked(i);
      RegionHeader* h = H();
      St(h->evictions, Ld(h->evictions) + 1);
      sync_.Publish(&h->lru_clock, kCacheLine);
      return true;
    }
    if (pass == 1) break;
    // Rescan: keep the kCandidates oldest, sorted newest first (so back() is the oldest).
    std::vector<std::pair<uint64_t, uint64_t>> heap;  // max-heap on last_access
    for (uint64_t i = 0; i < index_cap_; ++i) {
      IndexEntry* e = Entry(i);
      sync_.Fresh(e, kCacheLine);
      if (TagState(Ld(e->tag)) != kReady || Ld(e->pins) != 0) continue;
      heap.emplace_back(Ld(e->last_access), i);
      std::push_heap(heap.begin(), heap.end());
      if (heap.size() > kCandidates) {
        std::pop_heap(heap.begin(), heap.end());
        heap.pop_back();
      }
    }
    std::sort(heap.begin(), heap.end(), std::greater<>());
    lru_candidates_ = std::move(heap);
    if (lru_candidates_.empty()) break;
  }
  return false;
}

}  // namespace dualpath::pool
