#include "dualpath/sim/event_queue.h"

#include "dualpath/common/check.h"

namespace dualpath::sim {

void EventQueue::Push(double time, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(time >= now_, "event scheduled before the current simulated time");
  const Event e{time, next_seq_++, kind, a, b};
  // Sift up: move parents that pop after `e` down until e's place is found (a hole, not swaps).
  size_t i = heap_.size();
  heap_.emplace_back();
  while (i > 0) {
    const size_t parent = (i - 1) / kArity;
    if (!Earlier(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

Event EventQueue::Pop() {
  DUALPATH_CHECK(!heap_.empty(), "Pop() on an empty event queue");
  const Event top = heap_.front();
  const Event last = heap_.back();
  heap_.pop_back();
  const size_t n = heap_.size();
  if (n > 0) {
    // Sift `last` down from the root: the earliest of up to kArity children moves up.
    size_t i = 0;
    for (;;) {
      const size_t first = i * kArity + 1;
      if (first >= n) break;
      const size_t end = first + kArity < n ? first + kArity : n;
      size_t best = first;
      for (size_t c = first + 1; c < end; ++c) {
        if (Earlier(heap_[c], heap_[best])) best = c;
      }
      if (!Earlier(heap_[best], last)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = last;
  }
  now_ = top.time;
  ++processed_;
  return top;
}

}  // namespace dualpath::sim
