#include "dualpath/common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace dualpath::huge_pages {
namespace {

size_t RoundUp(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

}  // namespace

void* TryMap(size_t bytes) noexcept {
  if (bytes > SIZE_MAX - 2 * kHugePage) return nullptr;
  const size_t len = RoundUp(bytes);
  // Over-map by one huge page, then trim to the aligned `len` (mmap aligns to 4 KiB only).
  void* raw =
      mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + len + kHugePage;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  // A hint: EINVAL on a kernel without THP leaves an ordinary mapping, which is still correct.
  (void)madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void* Map(size_t bytes) {
  void* p = TryMap(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void Unmap(void* p, size_t bytes) noexcept {
  if (p != nullptr) munmap(p, RoundUp(bytes));
}

bool Advised(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    // A mapping's header: "start-end perms ..." in hex; its fields follow, VmFlags last.
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      std::istringstream flags(line.substr(8));
      std::string f;
      while (flags >> f) {
        if (f == "hg") return true;
      }
      return false;
    }
  }
  return false;
}

}  // namespace dualpath::huge_pages
