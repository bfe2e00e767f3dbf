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
// How: the memory comes from operator new (so the heap accounting of docs/store.md "Memory" is
// unchanged: no alignment padding, no separate mapping), and before anything touches it the
// 2 MiB-aligned interior of the block is marked MADV_HUGEPAGE, which the kernel honours in its
// default THP mode ("madvise") at the first touch. Best effort: a kernel without THP, or with it
// off, ignores the advice and the array works on small pages. Only blocks of at least 4 MiB are
// advised (smaller ones hold no whole huge page worth the split of a VMA).
//
// Thread safety: none needed (plain allocation); the arrays are MasterState's, under its lock.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

namespace dualpath::store {

// Frees an array made by MakeHugeArray (its elements are trivially destructible).
struct HugeArrayDeleter {
  void operator()(void* p) const { ::operator delete(p); }
};

template <typename T>
using HugeArray = std::unique_ptr<T[], HugeArrayDeleter>;

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

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

// n value-initialised elements (T{}), huge pages advised before the first touch.
template <typename T>
HugeArray<T> MakeHugeArray(size_t n) {
  static_assert(std::is_trivially_destructible_v<T>, "HugeArray frees without destructors");
  void* raw = ::operator new(n * sizeof(T));
  AdviseHugePages(raw, n * sizeof(T));
  T* p = static_cast<T*>(raw);
  for (size_t i = 0; i < n; ++i) ::new (static_cast<void*>(p + i)) T{};
  return HugeArray<T>(p);
}

}  // namespace dualpath::store
