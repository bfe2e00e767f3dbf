#include "dualpath/sim/event_queue.h"

#include <algorithm>

#include "dualpath/common/check.h"

namespace dualpath::sim {

void EventQueue::Push(double time, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(time >= now_, "event scheduled before the current simulated time");
  heap_.push_back(Event{time, next_seq_++, kind, a, b});
  std::push_heap(heap_.begin(), heap_.end(), Later);
}

Event EventQueue::Pop() {
  DUALPATH_CHECK(!heap_.empty(), "Pop() on an empty event queue");
  std::pop_heap(heap_.begin(), heap_.end(), Later);
  Event e = heap_.back();
  heap_.pop_back();
  now_ = e.time;
  ++processed_;
  return e;
}

}  // namespace dualpath::sim
