#include "sim/storage_nic.h"

#include <algorithm>
#include <cmath>

#include "dualpath/common/check.h"

namespace dualpath::sim {

StorageNic::StorageNic(double bytes_per_s, double buffer_bytes, double window_s)
    : rate_(bytes_per_s), buffer_capacity_(buffer_bytes), bins_(window_s) {}

void StorageNic::Enqueue(double /*now*/, uint64_t tag, double bytes) {
  waiting_.push_back(Waiting{tag, bytes});
  waiting_bytes_ += bytes;
}

void StorageNic::Admit(double now, std::vector<Started>* started) {
  while (!waiting_.empty()) {
    const Waiting& w = waiting_.front();
    const bool fits = buffer_used_ + w.bytes <= buffer_capacity_;
    if (!fits && buffer_used_ > 0) {
      break;  // FIFO: the head waits for space; later reads wait behind it
    }
    buffer_used_ += w.bytes;
    waiting_bytes_ -= w.bytes;
    const double start = std::max(now, busy_until_);
    busy_until_ = start + w.bytes / rate_;
    Record(start, busy_until_);
    total_bytes_ += w.bytes;
    started->push_back(Started{w.tag, busy_until_});
    waiting_.pop_front();
  }
}

void StorageNic::Release(double bytes) {
  buffer_used_ -= bytes;
  DUALPATH_CHECK(buffer_used_ > -1.0, "storage buffer released more than it held");
  buffer_used_ = std::max(0.0, buffer_used_);
}

void StorageNic::Record(double start, double end) {
  // Spread [start, end) at the full rate over the windows it overlaps.
  bins_.AddSpread(start, end, rate_);
}

}  // namespace dualpath::sim
