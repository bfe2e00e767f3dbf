// ByteBudget: the in-process limit on low-class bytes in flight.
//
// KV traffic must only use spare bandwidth (DualPath §5); on TCP, where the network has no
// arbiter of its own unless the operator configured one, bounding what the low class keeps
// queued in socket buffers also bounds how long a high-class message can wait behind it inside
// this host. A batch larger than the whole budget is admitted when nothing else is in flight, so
// it is never starved.
//
// Thread safety: none; the engine's progress thread owns it.
#pragma once

#include <cstdint>

namespace dualpath::transfer {

class ByteBudget {
 public:
  // limit 0 means unlimited.
  explicit ByteBudget(uint64_t limit) : limit_(limit) {}

  // Admits `bytes` if they fit (or nothing is in flight) and returns true; false otherwise.
  bool TryAcquire(uint64_t bytes);
  // Returns bytes admitted earlier. Precondition (checked): bytes <= in_flight().
  void Release(uint64_t bytes);

  uint64_t in_flight() const { return in_flight_; }
  uint64_t limit() const { return limit_; }

 private:
  uint64_t limit_;
  uint64_t in_flight_ = 0;
};

}  // namespace dualpath::transfer
