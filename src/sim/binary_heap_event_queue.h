// The simulator's event queue before issue 27: a binary heap through std::push_heap/pop_heap.
// Kept only as the reference that event_queue_test.cc checks EventQueue against (same pop order
// on random inputs) and that bench/sim measures EventQueue's speed against. Not used by sim.
//
// Thread safety: none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dualpath/sim/event_queue.h"

namespace dualpath::sim {

class BinaryHeapEventQueue {
 public:
  void Push(double time, uint32_t kind, uint32_t a = 0, uint64_t b = 0) {
    heap_.push_back(Event{time, next_seq_++, kind, a, b});
    std::push_heap(heap_.begin(), heap_.end(), Later);
  }
  bool Empty() const { return heap_.empty(); }
  size_t Size() const { return heap_.size(); }
  Event Pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later);
    Event e = heap_.back();
    heap_.pop_back();
    now_ = e.time;
    return e;
  }
  double Now() const { return now_; }

 private:
  static bool Later(const Event& x, const Event& y) {
    return x.time > y.time || (x.time == y.time && x.seq > y.seq);
  }
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
  double now_ = 0;
};

}  // namespace dualpath::sim
