#include "dualpath/sim/event_queue.h"

#include <bit>
#include <limits>

#include "dualpath/common/check.h"

namespace dualpath::sim {

EventCalendar::EventCalendar() : ring_(kBuckets, Bucket{kNil, 0}), nonempty_(kBuckets / 64, 0) {}

void EventCalendar::SetWidth(double width_s) {
  DUALPATH_CHECK(width_s > 0 && width_s < std::numeric_limits<double>::infinity(),
                 "EventCalendar: the bucket width must be positive and finite");
  DUALPATH_CHECK(empty(), "EventCalendar: the bucket width is set before any push");
  inv_width_ = 1.0 / width_s;
  base_ = 0;
}

void EventCalendar::Place(const Event& e, uint32_t b) {
  uint32_t n = free_;
  if (n != kNil) {
    free_ = pool_[n].next;
  } else {
    n = static_cast<uint32_t>(pool_.size());
    pool_.emplace_back();
  }
  pool_[n].e = e;
  Bucket& bucket = ring_[b];
  pool_[n].next = bucket.head;
  // A new head: if the front was this bucket's head, the new node is now its predecessor.
  if (in_ring_ != 0 && front_bucket_ == b && front_prev_ == kNil) front_prev_ = n;
  bucket.head = n;
  ++bucket.count;
  nonempty_[b / 64] |= uint64_t{1} << (b % 64);
  if (in_ring_++ == 0 || Order::Earlier(e, pool_[front_].e)) {
    front_ = n;
    front_prev_ = kNil;
    front_bucket_ = b;
  }
}

void EventCalendar::push(const Event& e) {
  const uint64_t k = BucketOf(e.time);
  // base_ is the bucket of an event popped before this one, so k >= base_ (times only grow).
  DUALPATH_CHECK(k >= base_, "EventCalendar: event before the window");
  const auto b = static_cast<uint32_t>(k & (kBuckets - 1));
  if (k - base_ < kBuckets && ring_[b].count < kMaxPerBucket) {
    Place(e, b);
  } else {
    overflow_.push(e);
  }
  // The new event is the front if it is earlier than the current one.
  ChooseFront();
}

void EventCalendar::FindFront() {
  if (in_ring_ == 0) return;
  // The first set bit at or after base_'s ring index, cyclically: the window's buckets in time
  // order (every ring event's bucket is in [base_, base_ + kBuckets)).
  const auto start = static_cast<uint32_t>(base_ & (kBuckets - 1));
  uint32_t w = start / 64;
  uint64_t bits = nonempty_[w] & (~uint64_t{0} << (start % 64));
  for (uint32_t n = 0; bits == 0; ++n) {
    DUALPATH_CHECK(n <= kBuckets / 64, "EventCalendar: ring count and bits disagree");
    w = (w + 1) % (kBuckets / 64);
    bits = nonempty_[w];
  }
  const uint32_t b = w * 64 + static_cast<uint32_t>(std::countr_zero(bits));
  uint32_t best = ring_[b].head, best_prev = kNil;
  for (uint32_t prev = best, n = pool_[best].next; n != kNil; prev = n, n = pool_[n].next) {
    if (Order::Earlier(pool_[n].e, pool_[best].e)) {
      best = n;
      best_prev = prev;
    }
  }
  front_ = best;
  front_prev_ = best_prev;
  front_bucket_ = b;
}

void EventCalendar::pop() {
  if (front_in_ring_) {
    Node& node = pool_[front_];
    // The window now starts at the popped event's bucket: no pending or later event is earlier.
    base_ = BucketOf(node.e.time);
    Bucket& bucket = ring_[front_bucket_];
    if (front_prev_ == kNil) {
      bucket.head = node.next;
    } else {
      pool_[front_prev_].next = node.next;
    }
    if (--bucket.count == 0) {
      nonempty_[front_bucket_ / 64] &= ~(uint64_t{1} << (front_bucket_ % 64));
    }
    node.next = free_;
    free_ = front_;
    --in_ring_;
    FindFront();
  } else {
    base_ = BucketOf(overflow_.top().time);
    overflow_.pop();
    // The ring's front is unchanged; base_ moved up to at most its bucket.
  }
  ChooseFront();
}

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
