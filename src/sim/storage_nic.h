// StorageNic: one node's storage NIC as a FIFO fluid server, plus the node's DRAM buffer that KV
// reads land in (DualPath §4.1 PE/DE buffers, sized per Appendix A.4).
//
// A read needs buffer space for its bytes before it may start; reads then stream at the NIC's
// full rate one after another (3FS saturates the NIC, no storage-side cache: §7.2), so a read's
// completion time is known when it starts. Pending bytes (waiting for buffer + not yet
// transferred) are the node's "disk read queue" that the §6.1 scheduler looks at. Transferred
// bytes are binned per time window (TimeBins) so utilization over time can be plotted (paper Figure
// 15) and the max/avg balance metric computed (Figure 13).
//
// Thread safety: none (owned by one simulation).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "sim/time_bins.h"

namespace dualpath::sim {

class StorageNic {
 public:
  StorageNic(double bytes_per_s, double buffer_bytes, double window_s);

  struct Started {
    uint64_t tag;
    double done_time;
  };

  // Queues a read of `bytes` for request `tag`. Reads larger than the whole buffer are admitted
  // alone (when the buffer is empty) so they cannot deadlock.
  void Enqueue(double now, uint64_t tag, double bytes);
  // Moves waiting reads into service while buffer space allows; appends what started.
  void Admit(double now, std::vector<Started>* started);
  // Returns buffer space (the request's KV left the buffer).
  void Release(double bytes);

  // Bytes not yet transferred at `now` (waiting + in service).
  // Inline: read for every engine report of every fetch.
  double PendingBytes(double now) const {
    return waiting_bytes_ + std::max(0.0, busy_until_ - now) * rate_;
  }
  double buffer_used() const { return buffer_used_; }
  double total_read_bytes() const { return total_bytes_; }
  // Bytes transferred per window (time_bins.h: the windows widen on long runs, so memory stays
  // bounded; bins().width() is the current width).
  const std::vector<double>& window_bytes() const { return bins_.values(); }
  TimeBins& bins() { return bins_; }
  double bytes_per_s() const { return rate_; }

 private:
  void Record(double start, double end);

  struct Waiting {
    uint64_t tag;
    double bytes;
  };
  double rate_;
  double buffer_capacity_;
  double buffer_used_ = 0;
  double busy_until_ = 0;
  double waiting_bytes_ = 0;
  double total_bytes_ = 0;
  std::deque<Waiting> waiting_;
  TimeBins bins_;
};

}  // namespace dualpath::sim
