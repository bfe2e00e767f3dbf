#include "store/extent_allocator.h"

#include <iterator>
#include <string>

#include "dualpath/common/check.h"

namespace dualpath::store {

ExtentAllocator::ExtentAllocator(uint64_t capacity) : capacity_(capacity) {
  if (capacity > 0) {
    free_.emplace(0, capacity);
  }
}

std::optional<uint64_t> ExtentAllocator::Allocate(uint64_t size) {
  DUALPATH_CHECK(size > 0, "ExtentAllocator::Allocate of 0 bytes");
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) {
      continue;
    }
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - size;
    free_.erase(it);
    if (rest > 0) {
      free_.emplace(offset + size, rest);
    }
    used_ += size;
    return offset;
  }
  return std::nullopt;
}

bool ExtentAllocator::AllocateAt(uint64_t offset, uint64_t size) {
  if (size == 0 || offset > capacity_ || size > capacity_ - offset) {
    return false;
  }
  // The free extent that starts at or before `offset`.
  auto it = free_.upper_bound(offset);
  if (it == free_.begin()) {
    return false;
  }
  --it;
  const uint64_t start = it->first;
  const uint64_t len = it->second;
  if (offset + size > start + len) {
    return false;
  }
  free_.erase(it);
  if (offset > start) {
    free_.emplace(start, offset - start);
  }
  if (start + len > offset + size) {
    free_.emplace(offset + size, start + len - (offset + size));
  }
  used_ += size;
  return true;
}

void ExtentAllocator::Free(uint64_t offset, uint64_t size) {
  DUALPATH_CHECK(size > 0 && offset <= capacity_ && size <= capacity_ - offset && size <= used_,
                 "ExtentAllocator::Free out of range: offset " + std::to_string(offset) + " size " +
                     std::to_string(size));
  auto next = free_.lower_bound(offset);
  // Neither neighbour may overlap the extent being freed.
  DUALPATH_CHECK(next == free_.end() || next->first >= offset + size,
                 "ExtentAllocator::Free of a free extent at " + std::to_string(offset));
  uint64_t start = offset;
  uint64_t len = size;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    DUALPATH_CHECK(prev->first + prev->second <= offset,
                   "ExtentAllocator::Free of a free extent at " + std::to_string(offset));
    if (prev->first + prev->second == offset) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == offset + size) {
    len += next->second;
    free_.erase(next);
  }
  free_.emplace(start, len);
  used_ -= size;
}

}  // namespace dualpath::store
