// AlignedBuffer: a heap buffer whose address and capacity are multiples of kIoAlign, as O_DIRECT
// requires (the kernel transfers whole logical blocks straight into user memory).
//
// Ownership: the buffer owns its memory; move-only. Thread safety: a value; concurrent reads of
// one buffer are fine, a writer needs external synchronization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dualpath::storage {

// Alignment for O_DIRECT address, offset and length. 4096 covers every device and file system we
// target (512-byte-sector disks accept it too); the block file format aligns its header to it.
inline constexpr size_t kIoAlign = 4096;

inline constexpr uint64_t AlignUp(uint64_t n, uint64_t a = kIoAlign) { return (n + a - 1) / a * a; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Capacity is rounded up to kIoAlign; contents are zeroed (O_DIRECT writes whole pages, so the
  // padding that reaches the disk before a truncate must not leak old heap contents).
  explicit AlignedBuffer(size_t capacity);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  std::span<std::byte> span() { return {data_, capacity_}; }
  std::span<const std::byte> span() const { return {data_, capacity_}; }

 private:
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace dualpath::storage
