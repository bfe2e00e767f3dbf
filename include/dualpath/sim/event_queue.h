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
// Several stores, one order:
// - Push(): a calendar queue (EventCalendar, below): buckets of simulated time in a ring, events
//   past the ring's window or in a crowded bucket in a 4-ary min-heap (QuadHeap, quad_heap.h).
//   It replaced the 4-ary heap as the store of every pushed event (issue 27: that heap's pop was
//   the largest single cost of a simulator run).
// - SetTimer(): keyed timers, at most one pending event per timer id (in the simulator: a prefill
//   group's forward end, a decode group's next completion). Setting a pending timer again
//   replaces its event; the replaced one is never popped but counted in Superseded(): it is the
//   event a plain queue would have popped later and ignored (the simulator's superseded decode
//   completions, pushed anew on every join and completion, went through the heap only to be
//   dropped). The timers sit in a tournament tree over the ids (a fixed array; an update walks
//   one leaf-to-root path), so they never touch the calendar. Meant for a few dozen timers: the
//   walk grows with log2 of the count, and 144 more (the simulator's fetch ticks) made a run
//   slower.
// - ReserveSeq() + PushReserved(): an event whose sequence number is taken now and which enters
//   the calendar later. It pops exactly where it would have had it been pushed when the number was
//   taken, provided it enters before it is due (checked). For the caller's time-ordered streams:
//   the simulator keeps each storage NIC's read completions (a FIFO server's: their times only
//   grow) in a FIFO of its own, with only the earliest queued here, so the queue holds one read per
//   NIC instead of every read in flight (thousands at 48P96D, issue 27).
// - PushDistant(): a second 4-ary heap, for events the caller keeps many of pending at once (in
//   the simulator: the agents' next arrivals after their think time, one per thinking agent,
//   ~48K at 48K agents). Kept apart from the calendar: all agents' first arrivals come at once,
//   and arrivals in it measured slower (the crowded buckets' events go to its overflow heap).
// All draw the sequence number from one counter, and Pop() takes the earliest of the fronts
// by (time, seq): a total order, so the pop order is the same as one priority queue holding every
// event (minus the superseded ones). event_queue_test.cc checks this against the binary
// std::push_heap queue this replaced, on random inputs; bench/sim compares speed.
//
// Thread safety: none; one simulation runs on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dualpath/sim/quad_heap.h"

namespace dualpath::sim {

struct Event {
  double time = 0;
  uint64_t seq = 0;  // push order, breaks ties between equal times
  uint32_t kind = 0;
  uint32_t a = 0;
  uint64_t b = 0;
};

// Events' order: (time, seq) as one 128-bit number (quad_heap.h NonNegativeKey), a total order
// (seq is unique). Every queued time is >= 0 (>= EventQueue::Now(), which starts at 0) and -0.0
// is stored as +0.0 (EventQueue::Normalize). The QuadHeap Order of every event store.
struct EventOrder {
  static bool Earlier(const Event& x, const Event& y) {
    return NonNegativeKey(x.time, x.seq) < NonNegativeKey(y.time, y.seq);
  }
  static size_t EarlierBit(const Event& x, const Event& y) {
    return static_cast<size_t>(Earlier(x, y));
  }
};

// The near events' store (EventQueue::Push): a calendar queue. Time is cut into buckets of a fixed
// width; bucket k holds events with floor(time / width) == k (one multiplication, rounded:
// monotone in time, so a lower bucket never holds a later event). A window of kBuckets
// consecutive buckets from `base_` (the bucket of the last event popped, never after the queue's
// current time) lives in a ring, with one bit per bucket saying it is non-empty. The ring's
// earliest event is the (time, seq)-least of the first non-empty bucket (a bit scan, then a look
// at that bucket's few events). Events past the window, and events for a bucket that already
// holds kMaxPerBucket (many events at one time would make every pop scan them all), go to a 4-ary
// heap instead (`overflow_`); the earliest event is the earlier of the two fronts, kept current
// by every push and pop.
// A bucket is a list of nodes from one pool, reused last-freed-first, so a push writes a node
// that is still in cache and the bucket heads are 4 bytes each (a vector per bucket missed the
// cache on every push). A push or pop is a few dozen instructions, where the heap this replaces
// walked four or five levels of children per pop: the simulator pops ~40 M of these events per
// 48P96D run (issue 27). The order is the heap's: a total order by (time, seq), whatever the
// width.
//
// Thread safety: none (owned by one EventQueue).
class EventCalendar {
 public:
  EventCalendar();
  // Bucket width in seconds of simulated time, > 0 and finite; only while empty (checked).
  void SetWidth(double width_s);
  bool empty() const { return in_ring_ == 0 && overflow_.empty(); }
  size_t size() const { return in_ring_ + overflow_.size(); }
  // The earliest event. Precondition: !empty().
  const Event& top() const { return front_in_ring_ ? pool_[front_].e : overflow_.top(); }
  // Precondition: e.time >= the time of every event popped so far (EventQueue checks).
  void push(const Event& e);
  // Removes top(). Precondition: !empty().
  void pop();

  static constexpr uint32_t kBuckets = 4096;  // a power of two
  static constexpr uint32_t kMaxPerBucket = 16;

 private:
  using Order = EventOrder;
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Node {
    Event e;
    uint32_t next;  // the next node of its bucket, or of the free list; kNil at the end
  };
  // The absolute bucket number of `time` (>= 0): floor(time / width), saturating far out.
  uint64_t BucketOf(double time) const {
    const double k = time * inv_width_;
    return k < 0x1p63 ? static_cast<uint64_t>(k) : (uint64_t{1} << 63);
  }
  // Puts `e` into ring bucket `b` (inside the window, not full).
  void Place(const Event& e, uint32_t b);
  // After a pop: the ring's earliest event (the first non-empty bucket from base_'s), then which
  // front is the earlier.
  void FindFront();
  void ChooseFront() {
    front_in_ring_ =
        in_ring_ != 0 && (overflow_.empty() || Order::Earlier(pool_[front_].e, overflow_.top()));
  }

  double inv_width_ = 1e3;
  uint64_t base_ = 0;  // the window's first bucket (absolute number)
  // A ring bucket (absolute number mod kBuckets): its first node (kNil: none) and its event
  // count, side by side (a push reads both).
  struct Bucket {
    uint32_t head;
    uint32_t count;
  };
  std::vector<Bucket> ring_;
  std::vector<uint64_t> nonempty_;  // one bit per ring bucket
  std::vector<Node> pool_;
  uint32_t free_ = kNil;  // free nodes of pool_, last freed first
  size_t in_ring_ = 0;
  uint32_t front_ = 0;          // the earliest ring event's node
  uint32_t front_prev_ = kNil;  // the node before it in its bucket, or kNil (it is the head)
  uint32_t front_bucket_ = 0;   // its ring bucket
  bool front_in_ring_ = false;  // top() is the ring's front (else overflow_'s top)
  QuadHeap<Event, Order> overflow_;
};

class EventQueue {
 public:
  // The near events' bucket width in simulated seconds (EventCalendar); call while the queue is
  // empty. Any width gives the same order; the speed is best with about one near event per
  // bucket (the simulator: half its fetch interval over the number of groups).
  void SetBucketWidth(double width_s) { heap_.SetWidth(width_s); }
  // Schedules an event. Precondition: time >= Now().
  void Push(double time, uint32_t kind, uint32_t a = 0, uint64_t b = 0);
  // The same as Push() (same number, same pop position), kept in the second heap: for events of
  // which many are pending at once (see above).
  void PushDistant(double time, uint32_t kind, uint32_t a = 0, uint64_t b = 0);
  // Takes the next sequence number, as Push() would, for an event pushed later by PushReserved.
  uint64_t ReserveSeq() { return next_seq_++; }
  // Schedules an event with a number from ReserveSeq(). Precondition (checked): it is not due yet,
  // i.e. (time, seq) is after the last popped event's, so it pops where a Push() at reservation
  // time would have put it.
  void PushReserved(double time, uint64_t seq, uint32_t kind, uint32_t a = 0, uint64_t b = 0);
  // Timer ids are 0..timers-1; call before the first SetTimer (drops any pending timers).
  void ResizeTimers(size_t timers);
  // Schedules timer `timer`'s event, replacing (superseding) a pending one. Takes the next
  // sequence number, as Push() does. Precondition: time >= Now(), timer < the ResizeTimers size.
  void SetTimer(uint32_t timer, double time, uint32_t kind, uint32_t a = 0, uint64_t b = 0);
  // Drops timer `timer`'s pending event (superseded); returns whether there was one.
  bool CancelTimer(uint32_t timer);
  bool TimerPending(uint32_t timer) const { return match_[leaves_ + timer].time != kNever; }
  bool Empty() const { return heap_.empty() && distant_.empty() && timers_pending_ == 0; }
  // Pending events, timers included.
  size_t Size() const { return heap_.size() + distant_.size() + timers_pending_; }
  // Removes and returns the earliest event and advances Now() to its time. Precondition: !Empty().
  Event Pop();
  // The event Pop() would return next, or nullptr when empty (lets the caller prefetch what the
  // next event will touch).
  const Event* Peek() const {
    const Event* h = HeapsFront();
    const Event* t = TimerFront();
    if (h == nullptr) return t;
    if (t != nullptr && EarlierKey(match_[1], *h)) return t;
    return h;
  }
  // Time of the last popped event (0 before the first).
  double Now() const { return now_; }
  // Events popped so far.
  uint64_t Processed() const { return processed_; }
  // Timer events replaced or cancelled before they were due.
  uint64_t Superseded() const { return superseded_; }

 private:
  // (time, seq) as one 128-bit number, as EventOrder compares them.
  static OrderKey128 OrderKey(double time, uint64_t seq) { return NonNegativeKey(time, seq); }
  // +0.0 for -0.0, otherwise `time` (x + 0.0 is exact; only a negative zero changes).
  static double Normalize(double time) { return time + 0.0; }
  // A tournament-tree entry: the (time, seq) key of the earliest pending timer below the node,
  // and which timer that is. A leaf with nothing pending holds time kNever, which loses every
  // match (a pending event's time is finite).
  struct Match {
    double time;
    uint64_t seq;
    uint64_t timer;
    uint64_t pad;  // 32 bytes: a node's two children share one cache line
  };
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  static bool EarlierKey(const Match& x, const Event& y) {
    return OrderKey(x.time, x.seq) < OrderKey(y.time, y.seq);
  }
  // Replays the matches on `timer`'s path to the root after its leaf changed. Branch-free: which
  // child wins is data, not control flow (the branchy version mispredicted on most levels and
  // cost more than the heap operations it saved).
  void UpdateTimer(uint32_t timer);
  // The earlier of the two heaps' tops, or nullptr when both are empty.
  const Event* HeapsFront() const {
    if (distant_.empty()) return heap_.empty() ? nullptr : &heap_.top();
    if (heap_.empty() || EventOrder::Earlier(distant_.top(), heap_.top())) return &distant_.top();
    return &heap_.top();
  }
  const Event* TimerFront() const {
    if (timers_pending_ == 0) return nullptr;
    return &timer_ev_[match_[1].timer];
  }

  EventCalendar heap_;                   // Push's and PushReserved's events
  QuadHeap<Event, EventOrder> distant_;  // PushDistant's events
  // Tournament tree: match_[1..leaves_-1] each match's winner, match_[leaves_ + t] timer t's own
  // key; leaves_ is the timer count rounded up to a power of two (at least 2; the padding leaves
  // are never pending).
  size_t leaves_ = 0;
  std::vector<Match> match_;
  std::vector<Event> timer_ev_;
  size_t timers_pending_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t processed_ = 0;
  uint64_t superseded_ = 0;
  double now_ = 0;
  uint64_t now_seq_ = 0;  // seq of the last popped event (with now_: PushReserved's check)
  bool popped_ = false;   // whether any event was popped yet
};

}  // namespace dualpath::sim
