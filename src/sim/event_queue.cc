#include "dualpath/sim/event_queue.h"

#include <bit>

#include "dualpath/common/check.h"

namespace dualpath::sim {

void EventQueue::Push(double time, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(time >= now_, "event scheduled before the current simulated time");
  heap_.push(Event{Normalize(time), next_seq_++, kind, a, b});
}

void EventQueue::PushDistant(double time, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(time >= now_, "event scheduled before the current simulated time");
  distant_.push(Event{Normalize(time), next_seq_++, kind, a, b});
}

void EventQueue::PushReserved(double time, uint64_t seq, uint32_t kind, uint32_t a, uint64_t b) {
  DUALPATH_CHECK(seq < next_seq_, "PushReserved: sequence number not from ReserveSeq()");
  // Due already: an event after it in (time, seq) order has been popped.
  DUALPATH_CHECK(!popped_ || time > now_ || (time == now_ && seq > now_seq_),
                 "PushReserved: event pushed after it was due");
  heap_.push(Event{Normalize(time), seq, kind, a, b});
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
  // The winner on the path stays in registers and each level loads only the sibling: reading
  // both children back from match_ made every level wait for the store of the one below
  // (store-to-load forwarding on the critical path of every SetTimer and timer pop, issue 27).
  size_t node = leaves_ + timer;
  Match cur = match_[node];
  for (; node > 1; node /= 2) {
    const Match& sib = match_[node ^ 1];
    const bool cur_is_right = (node & 1) != 0;
    const Match& l = cur_is_right ? sib : cur;
    const Match& r = cur_is_right ? cur : sib;
    // r wins only if strictly earlier: equal keys cannot occur (seq is unique) except between
    // two kNever leaves, where either will do.
    const uint64_t right =
        0 - static_cast<uint64_t>(OrderKey(r.time, r.seq) < OrderKey(l.time, l.seq));
    Match w;
    w.time = std::bit_cast<double>(
        std::bit_cast<uint64_t>(l.time) ^
        ((std::bit_cast<uint64_t>(l.time) ^ std::bit_cast<uint64_t>(r.time)) & right));
    w.seq = l.seq ^ ((l.seq ^ r.seq) & right);
    w.timer = l.timer ^ ((l.timer ^ r.timer) & right);
    w.pad = 0;
    match_[node / 2] = w;
    cur = w;
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
  time = Normalize(time);
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
