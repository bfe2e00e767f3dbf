#include "dualpath/transfer/byte_budget.h"

#include "dualpath/common/check.h"

namespace dualpath::transfer {

bool ByteBudget::TryAcquire(uint64_t bytes) {
  // An oversized batch goes alone rather than never; otherwise it must fit under the limit.
  if (limit_ != 0 && in_flight_ != 0 && (in_flight_ >= limit_ || bytes > limit_ - in_flight_)) {
    return false;
  }
  in_flight_ += bytes;
  return true;
}

void ByteBudget::Release(uint64_t bytes) {
  DUALPATH_CHECK(bytes <= in_flight_, "ByteBudget::Release of more bytes than are in flight");
  in_flight_ -= bytes;
}

}  // namespace dualpath::transfer
