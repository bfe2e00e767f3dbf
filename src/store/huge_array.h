// Large arrays of the store master's metadata (the key index's slots, the object slab's chunks)
// backed by transparent huge pages where the kernel offers them (issue 27: `exists` over gRPC).
//
// Why: a hit in MasterState::Exists reads a table slot and then a record, each at a random place
// in tens to hundreds of MiB. With 4 KiB pages nearly every such read also misses the TLB, and in
// a virtual machine a TLB miss is a two-dimensional page walk; `perf annotate` of the lookup
// pipeline put ~70% of its samples on the record prefetch and ~20% on the slot load, i.e. on
// address translation, not on the bytes. With 2 MiB pages the whole table and slab are covered
// by a few hundred TLB entries.
//
// How: an array whose size is a whole number of 2 MiB pages, at least two (the key index's slots
// from 512 Ki entries, every slab chunk: master_impl.h sizes them so), is its own anonymous
// mapping at a 2 MiB-aligned address, marked MADV_HUGEPAGE before anything touches it, which the
// kernel honours in its default THP mode ("madvise") at the first touch: every byte of it can be
// on huge pages. (They came from operator new before, with only their 2 MiB-aligned interior
// advised: neighbouring blocks shared the pages at their ends, and `AnonHugePages` of a master
// of 1 M objects counted ~64% of its arrays, a third in an earlier run.) Glibc's mallinfo2 does
// not see such mappings; HugeArrayMappedBytes() counts them for memory accounting (the master's
// heap figure in docs/store.md "Memory" is mallinfo2's bytes plus these). Other arrays come from
// operator new as before, their whole 2 MiB pages advised. Best effort: a kernel without THP, or
// with it off, ignores the advice and the array works on small pages; a refused mapping falls back
// to operator new.
//
// Thread safety: none needed (plain allocation); the arrays are MasterState's, under its lock.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "dualpath/common/huge_pages.h"

namespace dualpath::store {

inline constexpr size_t kHugePageBytes = huge_pages::kHugePage;

// Bytes of the live direct mappings of HugeArrays (process-wide; relaxed: a statistic).
inline std::atomic<size_t>& HugeArrayMappedCounter() {
  static std::atomic<size_t> bytes{0};
  return bytes;
}
inline size_t HugeArrayMappedBytes() {
  return HugeArrayMappedCounter().load(std::memory_order_relaxed);
}

// Frees an array made by MakeHugeArray (its elements are trivially destructible): unmaps it when
// it is a mapping of its own (`mapped` bytes), else gives it back to operator delete.
struct HugeArrayDeleter {
  size_t mapped = 0;
  void operator()(void* p) const {
    if (mapped == 0) {
      ::operator delete(p);
      return;
    }
    ::munmap(p, mapped);
    HugeArrayMappedCounter().fetch_sub(mapped, std::memory_order_relaxed);
  }
};

template <typename T>
using HugeArray = std::unique_ptr<T[], HugeArrayDeleter>;

// Marks the whole 2 MiB pages inside [p, p + bytes) MADV_HUGEPAGE (see above).
inline void AdviseHugePages(void* p, size_t bytes) {
  if (bytes < 2 * kHugePageBytes) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t last = (begin + bytes) & ~(kHugePageBytes - 1);
  if (last > first) {
    // Advice only: failure (no THP in this kernel) leaves ordinary pages.
    (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
}

// `bytes` (a multiple of kHugePageBytes) of fresh anonymous memory at a 2 MiB-aligned address,
// advised MADV_HUGEPAGE (common's huge_pages::TryMap: exactly `bytes` stay mapped); nullptr if
// the kernel refused the mapping.
inline void* MapHugeAligned(size_t bytes) {
  void* p = huge_pages::TryMap(bytes);
  if (p != nullptr) HugeArrayMappedCounter().fetch_add(bytes, std::memory_order_relaxed);
  return p;
}

// n value-initialised elements (T{}), huge pages advised before the first touch: a mapping of its
// own when n * sizeof(T) is two or more whole 2 MiB pages, else from operator new.
template <typename T>
HugeArray<T> MakeHugeArray(size_t n) {
  static_assert(std::is_trivially_destructible_v<T>, "HugeArray frees without destructors");
  const size_t bytes = n * sizeof(T);
  HugeArrayDeleter deleter;
  void* raw = nullptr;
  if (bytes >= 2 * kHugePageBytes && bytes % kHugePageBytes == 0) {
    raw = MapHugeAligned(bytes);
    if (raw != nullptr) deleter.mapped = bytes;
  }
  if (raw == nullptr) {
    raw = ::operator new(bytes);
    AdviseHugePages(raw, bytes);
  }
  T* p = static_cast<T*>(raw);
  for (size_t i = 0; i < n; ++i) ::new (static_cast<void*>(p + i)) T{};
  return HugeArray<T>(p, deleter);
}

}  // namespace dualpath::store
