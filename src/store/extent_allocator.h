// ExtentAllocator: the master's map of one node tier's byte range [0, capacity): which extents
// are free. Allocated extents are not recorded here (each object records its own offset and
// size), so memory is proportional to the number of free holes, not of objects.
//
// First fit over the free extents in offset order; Free coalesces with both neighbours, so equal-
// sized KV blocks (the common case: one model, one block size) reuse holes exactly.
//
// Ownership: a value. Thread safety: none; MasterState calls it under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace dualpath::store {

class ExtentAllocator {
 public:
  ExtentAllocator() = default;
  explicit ExtentAllocator(uint64_t capacity);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t free_bytes() const { return capacity_ - used_; }
  size_t free_extents() const { return free_.size(); }

  // The offset of `size` bytes (size > 0), or nullopt if no free extent is that large.
  std::optional<uint64_t> Allocate(uint64_t size);
  // Claims exactly [offset, offset + size) if all of it is free (a node's report); false if any
  // byte of it is taken or it runs past capacity.
  bool AllocateAt(uint64_t offset, uint64_t size);
  // Returns [offset, offset + size), which must be allocated (checked always: a double free would
  // hand one byte range to two objects).
  void Free(uint64_t offset, uint64_t size);

 private:
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, disjoint, never adjacent
};

}  // namespace dualpath::store
