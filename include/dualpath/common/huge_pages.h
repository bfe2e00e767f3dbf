// HugePageAllocator: a std::allocator for large arrays read at random places, backed by
// transparent huge pages where the kernel offers them.
//
// The simulator's largest tables (the workload's turns, the request records, the scheduler's
// request slots) are megabytes to hundreds of megabytes, and nearly every event reads one entry at
// a place unrelated to the last: with 4 KiB pages most of those reads also miss the TLB (48K
// agents touch ~46K pages of turns alone; a core's second-level TLB holds ~2K). The same tables in
// 2 MiB pages need a few dozen entries (issue 27: measured with glibc's
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1, 2-3 % of a 48P96D run; this allocator does the same for
// the tables that matter, without asking the user for an environment variable).
//
// An allocation of at least kHugeMin bytes is its own anonymous mapping, 2 MiB-aligned and a
// whole number of 2 MiB pages long, advised MADV_HUGEPAGE before anything touches it (with THP in
// "madvise" or "always" mode the kernel then faults it in 2 MiB pages; in "never" mode, or on a
// kernel without THP, it is an ordinary mapping: the advice is a hint and its failure is
// ignored). Smaller allocations go to operator new. Freed memory returns to the kernel at once
// (munmap). The contents are those of any allocator: only the page size differs.
//
// Thread safety: stateless; as thread-safe as mmap/munmap and operator new.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace dualpath {

namespace huge_pages {
// Under AddressSanitizer every buffer comes from operator new, so that ASan keeps checking
// accesses to it (it does not watch mappings of our own).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kEnabled = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kEnabled = false;
#else
inline constexpr bool kEnabled = true;
#endif
#else
inline constexpr bool kEnabled = true;
#endif
inline constexpr size_t kHugePage = size_t{2}
                                    << 20;  // x86-64's and arm64's (4 KiB granule) PMD size
inline constexpr size_t kHugeMin = size_t{1} << 20;  // smaller requests: operator new
// A kHugePage-aligned mapping of `bytes` rounded up to whole huge pages, advised MADV_HUGEPAGE;
// nullptr when the kernel refuses the mapping (or the size cannot be rounded).
void* TryMap(size_t bytes) noexcept;
// TryMap, throwing std::bad_alloc where it gives nullptr.
void* Map(size_t bytes);
// Unmaps what Map(bytes) returned (the same `bytes`).
void Unmap(void* p, size_t bytes) noexcept;
// Whether the mapping holding `p` carries the huge-page advice (/proc/self/smaps "hg"); false
// when that cannot be read. For tests.
bool Advised(const void* p);
}  // namespace huge_pages

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = n * sizeof(T);
    if (!huge_pages::kEnabled || bytes < huge_pages::kHugeMin) {
      return static_cast<T*>(::operator new (bytes, std::align_val_t{alignof(T)}));
    }
    return static_cast<T*>(huge_pages::Map(bytes));
  }
  void deallocate(T* p, size_t n) noexcept {
    const size_t bytes = n * sizeof(T);
    if (!huge_pages::kEnabled || bytes < huge_pages::kHugeMin) {
      ::operator delete (p, std::align_val_t{alignof(T)});
    } else {
      huge_pages::Unmap(p, bytes);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const noexcept {
    return true;  // stateless: any instance frees what another allocated
  }
};

// A vector whose large buffers are in huge pages (see above).
template <typename T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace dualpath
