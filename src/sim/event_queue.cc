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

void EventQueue::ResizeTimers(size_t timers) {
  leaves_ = 2;
  while (leaves_ < timers) leaves_ *= 2;
  match_.assign(2 * leaves_, Match{kNever, 0, 0, 0});
  for (size_t t = 0; t < leaves_; ++t) match_[leaves_ + t].timer = t;
  for (size_t node = leaves_ - 1; node >= 1; --node) match_[node] = match_[2 * node];
  timer_ev_.assign(leaves_, Event{});
  timers_pending_ = 0;
}

void EventQueue::UpdateTimer(uint32_t timer) {
  for (size_t node = (leaves_ + timer) / 2; node >= 1; node /= 2) {
    const Match& l = match_[2 * node];
    const Match& r = match_[2 * node + 1];
    // r wins only if strictly earlier: equal keys cannot occur (seq is unique) except between
    // two kNever leaves, where either will do.
    const size_t right =
        static_cast<size_t>(r.time < l.time) |
        (static_cast<size_t>(r.time == l.time) & static_cast<size_t>(r.seq < l.seq));
    match_[node] = match_[2 * node + right];
  }
}

void EventQueue::SetTimer(uint32_t timer, double time, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(time >= now_, "event scheduled before the current simulated time");
  DUALPATH_CHECK(timer < leaves_, "SetTimer: unknown timer");
  DUALPATH_CHECK(time < kNever, "SetTimer: time must be finite");
  Match& leaf = match_[leaves_ + timer];
  if (leaf.time != kNever) {
    ++superseded_;
  } else {
    ++timers_pending_;
  }
  const uint64_t seq = next_seq_++;
  timer_ev_[timer] = Event{time, seq, kind, a, b};
  leaf.time = time;
  leaf.seq = seq;
  UpdateTimer(timer);
}

bool EventQueue::CancelTimer(uint32_t timer) {
  DUALPATH_CHECK(timer < leaves_, "CancelTimer: unknown timer");
  Match& leaf = match_[leaves_ + timer];
  if (leaf.time == kNever) return false;
  leaf.time = kNever;
  --timers_pending_;
  ++superseded_;
  UpdateTimer(timer);
  return true;
}

Event EventQueue::Pop() {
  DUALPATH_CHECK(!Empty(), "Pop() on an empty event queue");
  const Event* t = TimerFront();
  if (t != nullptr && (heap_.empty() || EarlierKey(match_[1], heap_.front()))) {
    const Event top = *t;
    const auto timer = static_cast<uint32_t>(match_[1].timer);
    match_[leaves_ + timer].time = kNever;
    --timers_pending_;
    UpdateTimer(timer);
    now_ = top.time;
    ++processed_;
    return top;
  }
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
      size_t best;
      if (first + kArity <= n) {
        // Four children: the earliest by a branch-free tournament. Which child wins is data the
        // branch predictor cannot learn; as branches these comparisons mispredicted about once a
        // level and were most of Pop's time (issue 27). Keys are unique, so any way of finding
        // the earliest child finds the same one.
        const Event* c = &heap_[first];
        const size_t b01 = EarlierBit(c[1], c[0]);
        const size_t b23 = 2 + EarlierBit(c[3], c[2]);
        const size_t pick = EarlierBit(c[b23], c[b01]);
        best = first + (b01 ^ ((b01 ^ b23) & (0 - pick)));
      } else {
        best = first;
        for (size_t c = first + 1; c < n; ++c) {
          if (Earlier(heap_[c], heap_[best])) best = c;
        }
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
