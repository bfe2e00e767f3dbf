// EventQueue: the discrete-event core of the simulator.
//
// Events are (time, kind, a, b) records ordered by time; events at the same time pop in the order
// they were pushed (a sequence number breaks ties), so a run is deterministic for a given input
// and never depends on heap internals. Time is simulated seconds (double): the simulator models
// hours of cluster time at microsecond resolution, well within a double's 53-bit mantissa.
//
// The queue owns nothing but the records; what `a` and `b` mean is up to the caller (request id,
// engine group index, ...). Time never goes backwards: Push() of a time before Now() is an
// invariant violation (checked).
//
// Layout: a 4-ary min-heap over one flat vector of 32-byte records (no allocation per event once
// the vector has grown; a node's four children share two cache lines, and the heap is half as
// deep as a binary one). (time, seq) is a total order, so the pop order is the same as any other
// correct priority queue's: the binary std::push_heap queue this replaced pops the same sequence
// (event_queue_test.cc checks both side by side on random inputs; bench/sim compares speed).
//
// Thread safety: none; one simulation runs on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dualpath::sim {

struct Event {
  double time = 0;
  uint64_t seq = 0;  // push order, breaks ties between equal times
  uint32_t kind = 0;
  uint32_t a = 0;
  uint64_t b = 0;
};

class EventQueue {
 public:
  // Schedules an event. Precondition: time >= Now().
  void Push(double time, uint32_t kind, uint32_t a = 0, uint64_t b = 0);
  bool Empty() const { return heap_.empty(); }
  size_t Size() const { return heap_.size(); }
  // Removes and returns the earliest event and advances Now() to its time. Precondition: !Empty().
  Event Pop();
  // The event Pop() would return next, or nullptr when empty (lets the caller prefetch what the
  // next event will touch).
  const Event* Peek() const { return heap_.empty() ? nullptr : heap_.data(); }
  // Time of the last popped event (0 before the first).
  double Now() const { return now_; }
  // Events popped so far.
  uint64_t Processed() const { return processed_; }

 private:
  static constexpr size_t kArity = 4;
  // x pops before y.
  static bool Earlier(const Event& x, const Event& y) {
    return x.time < y.time || (x.time == y.time && x.seq < y.seq);
  }
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
  uint64_t processed_ = 0;
  double now_ = 0;
};

}  // namespace dualpath::sim
