#include "dualpath/sim/event_queue.h"

#include "dualpath/common/check.h"

namespace dualpath::sim {

void EventQueue::Push(double time, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(time >= now_, "event scheduled before the current simulated time");
  heap_.push(Event{time, next_seq_++, kind, a, b});
}

void EventQueue::PushDistant(double time, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(time >= now_, "event scheduled before the current simulated time");
  distant_.push(Event{time, next_seq_++, kind, a, b});
}

void EventQueue::PushReserved(double time, uint64_t seq, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(seq < next_seq_, "PushReserved: sequence number not from ReserveSeq()");
  // Due already: an event after it in (time, seq) order has been popped.
  DUALPATH_CHECK(!popped_ || time > now_ || (time == now_ && seq > now_seq_),
                 "PushReserved: event pushed after it was due");
  heap_.push(Event{time, seq, kind, a, b});
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
  const Event* h = HeapsFront();
  if (t != nullptr && (h == nullptr || EarlierKey(match_[1], *h))) {
    const Event top = *t;
    const auto timer = static_cast<uint32_t>(match_[1].timer);
    match_[leaves_ + timer].time = kNever;
    --timers_pending_;
    UpdateTimer(timer);
    now_ = top.time;
    now_seq_ = top.seq;
    popped_ = true;
    ++processed_;
    return top;
  }
  const bool distant = !distant_.empty() && h == &distant_.top();
  const Event top = *h;
  if (distant) {
    distant_.pop();
  } else {
    heap_.pop();
  }
  now_ = top.time;
  now_seq_ = top.seq;
  popped_ = true;
  ++processed_;
  return top;
}

}  // namespace dualpath::sim
