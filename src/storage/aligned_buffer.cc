#include "dualpath/storage/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "dualpath/common/check.h"

namespace dualpath::storage {

AlignedBuffer::AlignedBuffer(size_t capacity) : capacity_(AlignUp(capacity)) {
  if (capacity_ == 0) {
    return;
  }
  void* p = std::aligned_alloc(kIoAlign, capacity_);
  DUALPATH_CHECK(p != nullptr, "aligned_alloc failed");
  std::memset(p, 0, capacity_);
  data_ = static_cast<std::byte*>(p);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

}  // namespace dualpath::storage
