// Cache-line maintenance for the non-coherent memory model (TraCT §3.4).
//
// On memory shared by hosts without coherence, a store sits in the writer's cache until written
// back, and a reader may hit a stale line of its own. So:
//  - metadata: after writing a line, FlushLines (clflush: synchronous write-back + invalidate, and
//    TraCT's reason for not using clflushopt there: clflushopt's completion is not ordered by a
//    later mfence with respect to other hosts); before reading a line, FlushLines too (drops a
//    possibly stale copy).
//  - payload: written with non-temporal stores (StreamCopy), so it never sits dirty in a CPU
//    cache; before a CPU reads a payload, InvalidateRange drops stale lines (clflushopt, which is
//    fine here: only this CPU's later loads need ordering, and the mfence gives that).
//
// Sync bundles these behind the region's memory model: in the coherent model every call is a
// no-op, so callers write one code path.
//
// Thread safety: stateless functions; Sync is immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dualpath::pool::internal {

void FlushLines(const void* p, size_t n);
void InvalidateRange(const void* p, size_t n);
// memcpy with non-temporal stores for the 64-byte-aligned body; partial head/tail lines are
// flushed. Ends with sfence.
void StreamCopy(void* dst, const void* src, size_t n);
bool HaveClflushopt();

class Sync {
 public:
  explicit Sync(bool noncoherent) : noncoherent_(noncoherent) {}
  bool noncoherent() const { return noncoherent_; }
  // Before reading shared metadata at [p, p+n).
  void Fresh(const void* p, size_t n) const {
    if (noncoherent_) FlushLines(p, n);
  }
  // After writing shared metadata at [p, p+n).
  void Publish(const void* p, size_t n) const {
    if (noncoherent_) FlushLines(p, n);
  }
  template <typename T>
  void Fresh(const T* p) const {
    Fresh(p, sizeof(T));
  }
  template <typename T>
  void Publish(const T* p) const {
    Publish(p, sizeof(T));
  }

 private:
  bool noncoherent_;
};

}  // namespace dualpath::pool::internal
