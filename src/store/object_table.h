// ObjectTable: the store master's index from an object's key to its record (issue 27: half the
// master memory per object). An open-addressing table of (tag, index) pairs, 8 bytes a slot, keyed
// by the key's own hash (the block hash is a digest already): no node, no pointer, no allocation
// per object. The records live elsewhere (MasterState::Impl's slab); the table stores their 32-bit
// index and 32 further bits of the hash as a tag, so a probe that meets another key is rejected
// from the table's own cache line and only a tag match reads the record.
//
// Linear probing, power-of-two capacity, at most 3/4 full (a doubling rehash past that). Erase
// shifts the following entries of the cluster back (no tombstones), so a lookup's probe length
// depends only on the live entries. Growth and erase need an entry's hash again: the caller passes
// a function of the record index (the record holds the key).
//
// Ownership: a value; owns its slot array. Thread safety: none (MasterState calls it under its
// lock).
#pragma once

#include <cstdint>

#include "dualpath/common/check.h"
#include "store/huge_array.h"

namespace dualpath::store {

class ObjectTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  // Bytes of the slot array (for the memory accounting of benchmarks).
  size_t bytes() const { return capacity_ * sizeof(Slot); }

  // The index whose record matches (eq(index) true) among the entries of hash h; kNone if none.
  template <typename Eq>
  uint32_t Find(uint64_t h, const Eq& eq) const {
    if (capacity_ == 0) return kNone;
    const uint32_t tag = Tag(h);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.index == kNone) return kNone;
      if (s.tag == tag && eq(s.index)) return s.index;
    }
  }

  // Batch lookups (MasterState's Exists) overlap the cache misses of many keys instead of waiting
  // out each one: Prefetch(h) starts loading h's home slot; Candidate(h), once that line is in,
  // probes the table alone and answers the first entry whose tag matches (kNone when the probe
  // meets an empty slot first: certainly absent), whose record the caller prefetches in turn. A
  // candidate is only likely: the caller confirms it with eq and, when eq says no (a 32-bit tag
  // collision), asks Find, which goes on past it.
  void Prefetch(uint64_t h) const {
    if (capacity_ != 0) __builtin_prefetch(&slots_[h & mask_]);
  }
  uint32_t Candidate(uint64_t h) const {
    if (capacity_ == 0) return kNone;
    const uint32_t tag = Tag(h);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.index == kNone || s.tag == tag) return s.index;
    }
  }

  // Adds `index` under hash h (the caller checked that its key is absent). hash_of(index) gives
  // any entry's hash back, for a rehash.
  template <typename HashOf>
  void Insert(uint64_t h, uint32_t index, const HashOf& hash_of) {
    DUALPATH_CHECK(index != kNone, "store master: object index out of range");
    if ((size_ + 1) * 4 > capacity_ * 3) Grow(hash_of);
    Place(h, index);
    size_++;
  }

  // Removes the entry of `index` (whose hash is h; it must be present), shifting back the entries
  // after it in its cluster that may move closer to their home slot.
  template <typename HashOf>
  void Erase(uint64_t h, uint32_t index, const HashOf& hash_of) {
    size_t i = h & mask_;
    while (slots_[i].index != index) {
      DUALPATH_CHECK(slots_[i].index != kNone, "store master: erasing an object not indexed");
      i = (i + 1) & mask_;
    }
    // Backward shift: a later entry j of the cluster moves into the hole at i unless its home
    // slot lies cyclically in (i, j] (then it would land before its home and never be found).
    for (size_t j = (i + 1) & mask_; slots_[j].index != kNone; j = (j + 1) & mask_) {
      const size_t home = hash_of(slots_[j].index) & mask_;
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = Slot{};
    size_--;
  }

  // Calls fn(index) for every entry, in slot order.
  template <typename Fn>
  void ForEach(const Fn& fn) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].index != kNone) fn(slots_[i].index);
    }
  }

 private:
  struct Slot {
    uint32_t tag = 0;
    uint32_t index = kNone;
  };
  // The table's position uses the low bits of h; the tag the high 32, independent of them.
  static uint32_t Tag(uint64_t h) { return static_cast<uint32_t>(h >> 32); }

  void Place(uint64_t h, uint32_t index) {
    size_t i = h & mask_;
    while (slots_[i].index != kNone) i = (i + 1) & mask_;
    slots_[i] = Slot{Tag(h), index};
  }

  template <typename HashOf>
  void Grow(const HashOf& hash_of) {
    const size_t old_capacity = capacity_;
    HugeArray<Slot> old = std::move(slots_);
    capacity_ = old_capacity == 0 ? 64 : old_capacity * 2;
    DUALPATH_CHECK(capacity_ <= (size_t{1} << 33), "store master: object table too large");
    mask_ = capacity_ - 1;
    slots_ = MakeHugeArray<Slot>(capacity_);  // huge pages: one TLB entry per 2 MiB of slots
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].index != kNone) Place(hash_of(old[i].index), old[i].index);
    }
  }

  HugeArray<Slot> slots_;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace dualpath::store
