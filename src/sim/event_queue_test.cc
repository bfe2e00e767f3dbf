#include "dualpath/sim/event_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "sim/binary_heap_event_queue.h"

namespace dualpath::sim {
namespace {

// `x` (popped from the queue under test) is `y` (popped from the reference), field by field.
void ExpectSameEvent(const Event& x, const Event& y) {
  ASSERT_EQ(x.seq, y.seq);
  ASSERT_EQ(x.time, y.time);
  ASSERT_EQ(x.kind, y.kind);
  ASSERT_EQ(x.a, y.a);
  ASSERT_EQ(x.b, y.b);
}

// Pops both queues into *x: the same event, and the one q's Peek() showed before the pop.
void PopBoth(EventQueue& q, BinaryHeapEventQueue& ref, Event* x) {
  ASSERT_NE(q.Peek(), nullptr);
  const Event peeked = *q.Peek();
  *x = q.Pop();
  ASSERT_NO_FATAL_FAILURE(ExpectSameEvent(*x, ref.Pop()));
  ASSERT_EQ(peeked.seq, x->seq);  // Peek() is what Pop() returns
}

TEST(EventQueueTest, PopsInTimeOrder) {
  EventQueue q;
  q.Push(3.0, 1);
  q.Push(1.0, 2);
  q.Push(2.0, 3);
  EXPECT_EQ(q.Pop().kind, 2u);
  EXPECT_DOUBLE_EQ(q.Now(), 1.0);
  EXPECT_EQ(q.Pop().kind, 3u);
  EXPECT_EQ(q.Pop().kind, 1u);
  EXPECT_TRUE(q.Empty());
  EXPECT_EQ(q.Processed(), 3u);
}

TEST(EventQueueTest, EqualTimesPopInPushOrder) {
  EventQueue q;
  for (uint32_t i = 0; i < 100; ++i) q.Push(5.0, i, i, 1000 + i);
  for (uint32_t i = 0; i < 100; ++i) {
    const Event e = q.Pop();
    EXPECT_EQ(e.kind, i);
    EXPECT_EQ(e.a, i);
    EXPECT_EQ(e.b, 1000u + i);
  }
}

// The queue compares (time, seq) as the bits of the time (EventQueue::OrderKey), which order as
// the doubles do only for non-negative values: -0.0 (equal to 0.0 as a double) must still tie
// with 0.0 and pop in push order, in every store (heap, second heap, timers).
TEST(EventQueueTest, NegativeZeroTiesWithZero) {
  EventQueue q;
  q.ResizeTimers(2);
  q.Push(-0.0, 1);
  q.PushDistant(0.0, 2);
  q.SetTimer(0, -0.0, 3);
  q.Push(0.0, 4);
  q.PushDistant(-0.0, 5);
  q.SetTimer(1, 0.0, 6);
  q.Push(1e-300, 7);  // the smallest times after zero still pop after it
  for (uint32_t kind = 1; kind <= 7; ++kind) {
    ASSERT_FALSE(q.Empty());
    EXPECT_EQ(q.Peek()->kind, kind);
    EXPECT_EQ(q.Pop().kind, kind);
  }
  EXPECT_TRUE(q.Empty());
}

TEST(EventQueueTest, PushAtNowIsAllowedAndRunsAfterEarlierPushes) {
  EventQueue q;
  q.Push(1.0, 1);
  q.Push(1.0, 2);
  EXPECT_EQ(q.Pop().kind, 1u);
  q.Push(1.0, 3);  // same time as Now()
  EXPECT_EQ(q.Pop().kind, 2u);
  EXPECT_EQ(q.Pop().kind, 3u);
}

// The 4-ary heap against the binary heap it replaced (issue 27), on random interleavings of
// pushes and pops with many equal times: every pop must return the same event. The simulator's
// JSON is byte-identical only if this order is.
TEST(EventQueueTest, PopsTheSameSequenceAsTheBinaryHeap) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    EventQueue q;
    BinaryHeapEventQueue ref;
    uint64_t pops = 0;
    for (int step = 0; step < 20'000; ++step) {
      // Mostly pushes early, mostly pops late; sizes up to a few thousand.
      const bool push = q.Empty() || rng() % 100 < (step < 10'000 ? 65u : 35u);
      if (push) {
        // Few distinct offsets, so many events share a time (ties broken by push order).
        const double t = q.Now() + static_cast<double>(rng() % 8) * 0.25;
        const auto kind = static_cast<uint32_t>(rng() % 6);
        const auto a = static_cast<uint32_t>(rng());
        const uint64_t b = rng();
        q.Push(t, kind, a, b);
        ref.Push(t, kind, a, b);
      } else {
        SCOPED_TRACE(testing::Message() << "seed " << seed << " pop " << pops);
        Event x;
        ASSERT_NO_FATAL_FAILURE(PopBoth(q, ref, &x));
        ++pops;
      }
      ASSERT_EQ(q.Size(), ref.Size());
    }
    while (!q.Empty()) ASSERT_EQ(q.Pop().seq, ref.Pop().seq);
    EXPECT_TRUE(ref.Empty());
    EXPECT_EQ(q.Peek(), nullptr);
    EXPECT_GT(pops, 5'000u);
  }
}

// The calendar (EventCalendar, issue 27) against the binary heap, at bucket widths from "every
// event past the window" to "every event in one bucket": near events one per bucket or many
// (a bucket holds at most kMaxPerBucket, the rest wait in the overflow heap), far events past
// the window, equal times, zero, and times so large their bucket number saturates. Every pop and
// every Peek() is the heap's.
TEST(EventQueueTest, CalendarPopsLikeTheBinaryHeapAtEveryWidth) {
  for (const double width : {1e-9, 1e-4, 0.01, 0.25, 1e3}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      std::mt19937_64 rng(seed);
      EventQueue q;
      q.SetBucketWidth(width);
      BinaryHeapEventQueue ref;
      uint64_t pops = 0;
      for (int step = 0; step < 30'000; ++step) {
        const bool push = q.Empty() || rng() % 100 < (step < 15'000 ? 60u : 40u);
        if (push) {
          double t = q.Now();
          switch (rng() % 6) {
            case 0:  // a tie with other events at a few fixed offsets
              t += static_cast<double>(rng() % 4) * 0.25;
              break;
            case 1:  // near, continuous
            case 2:
              t += static_cast<double>(rng() % 1'000'000) * 1e-7;
              break;
            case 3:  // past any window of these widths but the widest
              t += 50.0 + static_cast<double>(rng() % 1000);
              break;
            case 4:  // now
              break;
            default:  // far out: bucket numbers saturate
              t += (rng() % 8 == 0) ? 1e300 : 1e6;
              break;
          }
          const auto kind = static_cast<uint32_t>(rng() % 6);
          const uint64_t b = rng();
          q.Push(t, kind, 0, b);
          ref.Push(t, kind, 0, b);
        } else {
          SCOPED_TRACE(testing::Message()
                       << "width " << width << " seed " << seed << " pop " << pops);
          Event x;
          ASSERT_NO_FATAL_FAILURE(PopBoth(q, ref, &x));
          ++pops;
        }
        ASSERT_EQ(q.Size(), ref.Size());
      }
      while (!q.Empty()) ASSERT_EQ(q.Pop().seq, ref.Pop().seq);
      EXPECT_TRUE(ref.Empty());
      EXPECT_GT(pops, 10'000u);
    }
  }
}

// More events at one time than a bucket holds (kMaxPerBucket): the rest wait in the overflow
// heap and still pop in push order among them and the bucket's.
TEST(EventQueueTest, CrowdedBucketPopsInPushOrder) {
  EventQueue q;
  q.SetBucketWidth(1e-3);
  const uint32_t n = 5 * EventCalendar::kMaxPerBucket;
  for (uint32_t i = 0; i < n; ++i) q.Push(i % 2 == 0 ? 0.5 : 0.5 + 1e-9, i);
  q.Push(0.25, n);  // an earlier one after them
  EXPECT_EQ(q.Pop().kind, n);
  for (uint32_t i = 0; i < n; i += 2) EXPECT_EQ(q.Pop().kind, i);
  for (uint32_t i = 1; i < n; i += 2) EXPECT_EQ(q.Pop().kind, i);
  EXPECT_TRUE(q.Empty());
}

// Timers (issue 27) against the queue they replace in the simulator: every event in one binary
// heap, a replaced timer's old event left in it and ignored when popped (what the simulator's
// version check did). On random interleavings of pushes, timer sets, cancels and pops with many
// equal times, the live events pop in the same order, and Processed() + Superseded() equals the
// reference's pops, the ignored ones included (the JSON's `events`).
TEST(EventQueueTest, TimersPopLikeOneHeapThatIgnoresReplacedEvents) {
  constexpr uint32_t kTimers = 13;  // not a power of two: padding leaves
  constexpr uint32_t kTimerKind = 100;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    EventQueue q;
    q.ResizeTimers(kTimers);
    BinaryHeapEventQueue ref;
    std::vector<uint64_t> version(kTimers, 0);  // b of each timer's live event in `ref`
    std::vector<bool> live(kTimers, false);
    uint64_t next_version = 1;
    uint64_t ref_pops = 0, timer_pops = 0;
    // Pops `ref` until a live event, counting the ignored ones; false when it is empty.
    auto ref_pop_live = [&](Event* out) {
      while (!ref.Empty()) {
        const Event e = ref.Pop();
        ++ref_pops;
        if (e.kind != kTimerKind) {
          *out = e;
          return true;
        }
        if (live[e.a] && version[e.a] == e.b) {
          live[e.a] = false;
          *out = e;
          return true;
        }
      }
      return false;
    };
    for (int step = 0; step < 20'000; ++step) {
      const uint64_t op = rng() % 100;
      const bool late = step >= 10'000;
      const double t = q.Now() + static_cast<double>(rng() % 8) * 0.25;
      if (op < (late ? 20u : 40u)) {
        const auto kind = static_cast<uint32_t>(rng() % 6);
        const auto a = static_cast<uint32_t>(rng());
        const uint64_t b = rng();
        q.Push(t, kind, a, b);
        ref.Push(t, kind, a, b);
      } else if (op < (late ? 40u : 70u)) {
        const auto timer = static_cast<uint32_t>(rng() % kTimers);
        const uint64_t v = next_version++;
        q.SetTimer(timer, t, kTimerKind, timer, v);
        ref.Push(t, kTimerKind, timer, v);
        version[timer] = v;
        live[timer] = true;
      } else if (op < (late ? 45u : 75u)) {
        const auto timer = static_cast<uint32_t>(rng() % kTimers);
        ASSERT_EQ(q.CancelTimer(timer), static_cast<bool>(live[timer]));
        live[timer] = false;
      } else if (!q.Empty()) {
        ASSERT_NE(q.Peek(), nullptr);
        const Event peeked = *q.Peek();
        const Event x = q.Pop();
        Event y;
        ASSERT_TRUE(ref_pop_live(&y)) << "seed " << seed << " step " << step;
        ASSERT_EQ(x.time, y.time);
        ASSERT_EQ(x.kind, y.kind);
        ASSERT_EQ(x.a, y.a);
        ASSERT_EQ(x.b, y.b);
        ASSERT_EQ(peeked.seq, x.seq);
        ASSERT_EQ(peeked.b, x.b);
        ASSERT_EQ(q.Now(), ref.Now());
        if (x.kind == kTimerKind) {
          ++timer_pops;
          ASSERT_FALSE(q.TimerPending(x.a));
        }
      }
    }
    Event y;
    while (!q.Empty()) {
      const Event x = q.Pop();
      ASSERT_TRUE(ref_pop_live(&y));
      ASSERT_EQ(x.b, y.b);
      ASSERT_EQ(x.time, y.time);
    }
    EXPECT_FALSE(ref_pop_live(&y));  // only ignored events were left
    EXPECT_EQ(q.Processed() + q.Superseded(), ref_pops);
    EXPECT_GT(q.Superseded(), 1'000u);
    EXPECT_GT(timer_pops, 500u);
  }
}

// Reserved events (issue 27) against pushing every event at once: time-ordered streams (as the
// simulator's storage-NIC read completions) kept aside in FIFOs, only each stream's first event in
// the queue (PushReserved when the one before it pops), pop in exactly the order the binary heap
// gives when every event is pushed where its number was reserved. Random interleavings with
// plain pushes, timers and many equal times. Fails if a reserved event enters with a fresh number
// (the order among equal times changes) or if the next one enters late.
TEST(EventQueueTest, ReservedStreamsPopLikePushingEveryEvent) {
  constexpr uint32_t kStreams = 7;
  constexpr uint32_t kStreamKind = 200;
  struct Pending {
    double time;
    uint64_t seq;
    uint64_t b;
  };
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    EventQueue q;
    q.ResizeTimers(3);
    BinaryHeapEventQueue ref;
    std::vector<std::vector<Pending>> fifo(kStreams);  // front = index head[s]
    std::vector<size_t> head(kStreams, 0);
    std::vector<double> last(kStreams, 0.0);  // each stream's times only grow
    uint64_t stream_pops = 0, pops = 0;
    for (int step = 0; step < 20'000; ++step) {
      const uint64_t op = rng() % 100;
      const bool late = step >= 10'000;
      if (op < (late ? 15u : 30u)) {
        const double t = q.Now() + static_cast<double>(rng() % 8) * 0.25;
        const uint64_t b = rng();
        q.Push(t, 1, 0, b);
        ref.Push(t, 1, 0, b);
      } else if (op < (late ? 40u : 65u)) {
        const auto s = static_cast<uint32_t>(rng() % kStreams);
        // Often the same time as the stream's previous event (ties within and across streams).
        last[s] = std::max(last[s], q.Now()) + static_cast<double>(rng() % 3) * 0.25;
        const uint64_t b = rng();
        const uint64_t seq = q.ReserveSeq();
        ref.Push(last[s], kStreamKind, s, b);
        fifo[s].push_back(Pending{last[s], seq, b});
        if (fifo[s].size() - head[s] == 1) q.PushReserved(last[s], seq, kStreamKind, s, b);
      } else if (op < (late ? 45u : 70u)) {
        // A timer, which the simulator's queue also holds (it takes numbers from the counter).
        const double t = q.Now() + static_cast<double>(rng() % 8) * 0.25;
        const uint64_t b = rng();
        const auto timer = static_cast<uint32_t>(rng() % 3);
        if (!q.TimerPending(timer)) {
          q.SetTimer(timer, t, 2, timer, b);
          ref.Push(t, 2, timer, b);
        }
      } else if (!q.Empty()) {
        const Event x = q.Pop();
        if (x.kind == kStreamKind) {
          ++stream_pops;
          const uint32_t s = x.a;
          ASSERT_EQ(fifo[s][head[s]].seq, x.seq);
          ++head[s];
          if (head[s] < fifo[s].size()) {
            const Pending& n = fifo[s][head[s]];
            q.PushReserved(n.time, n.seq, kStreamKind, s, n.b);
          }
        }
        SCOPED_TRACE(testing::Message() << "seed " << seed << " pop " << pops);
        ASSERT_NO_FATAL_FAILURE(ExpectSameEvent(x, ref.Pop()));
        ++pops;
      }
    }
    while (!q.Empty()) {
      const Event x = q.Pop();
      if (x.kind == kStreamKind) {
        const uint32_t s = x.a;
        ++head[s];
        if (head[s] < fifo[s].size()) {
          const Pending& n = fifo[s][head[s]];
          q.PushReserved(n.time, n.seq, kStreamKind, s, n.b);
        }
      }
      ASSERT_EQ(x.seq, ref.Pop().seq);
    }
    EXPECT_TRUE(ref.Empty());
    EXPECT_GT(stream_pops, 2'000u);
  }
}

// The second heap (PushDistant, issue 27) against one binary heap holding every event: on random
// interleavings of pushes to either heap, timer sets and pops, with many equal times across the
// heaps, every pop and every Peek() is the event one heap would give.
TEST(EventQueueTest, DistantHeapPopsLikeOneHeap) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    EventQueue q;
    q.ResizeTimers(3);
    BinaryHeapEventQueue ref;
    uint64_t pops = 0, distant_pops = 0;
    for (int step = 0; step < 20'000; ++step) {
      const uint64_t op = rng() % 100;
      const bool late = step >= 10'000;
      // Distant events far out and near (ties with the other heap's), the others near.
      const double t = q.Now() + static_cast<double>(rng() % 8) * 0.25;
      const uint64_t b = rng();
      if (op < (late ? 15u : 30u)) {
        q.Push(t, 1, 0, b);
        ref.Push(t, 1, 0, b);
      } else if (op < (late ? 35u : 60u)) {
        const double far = t + static_cast<double>(rng() % 2) * 8.0;
        q.PushDistant(far, 3, 0, b);
        ref.Push(far, 3, 0, b);
      } else if (op < (late ? 40u : 65u)) {
        const auto timer = static_cast<uint32_t>(rng() % 3);
        if (!q.TimerPending(timer)) {
          q.SetTimer(timer, t, 2, timer, b);
          ref.Push(t, 2, timer, b);
        }
      } else if (!q.Empty()) {
        SCOPED_TRACE(testing::Message() << "seed " << seed << " pop " << pops);
        Event x;
        ASSERT_NO_FATAL_FAILURE(PopBoth(q, ref, &x));
        if (x.kind == 3) ++distant_pops;
        ++pops;
      }
      ASSERT_EQ(q.Size(), ref.Size());
    }
    while (!q.Empty()) ASSERT_EQ(q.Pop().seq, ref.Pop().seq);
    EXPECT_TRUE(ref.Empty());
    EXPECT_GT(distant_pops, 2'000u);
  }
}

TEST(EventQueueTest, SingleTimerAndEmptyQueue) {
  EventQueue q;
  q.ResizeTimers(1);
  EXPECT_TRUE(q.Empty());
  EXPECT_EQ(q.Peek(), nullptr);
  q.SetTimer(0, 2.0, 7, 0, 1);
  q.SetTimer(0, 3.0, 7, 0, 2);  // replaces the first
  q.Push(2.5, 1);
  EXPECT_EQ(q.Size(), 2u);
  EXPECT_EQ(q.Pop().kind, 1u);
  const Event e = q.Pop();
  EXPECT_EQ(e.b, 2u);
  EXPECT_TRUE(q.Empty());
  EXPECT_EQ(q.Processed(), 2u);
  EXPECT_EQ(q.Superseded(), 1u);
  EXPECT_FALSE(q.CancelTimer(0));
}

TEST(EventQueueDeathTest, PushInThePastAborts) {
  EventQueue q;
  q.Push(2.0, 1);
  (void)q.Pop();
  EXPECT_DEATH(q.Push(1.0, 2), "before the current simulated time");
}

TEST(EventQueueDeathTest, TimerInThePastAborts) {
  EventQueue q;
  q.ResizeTimers(2);
  q.Push(2.0, 1);
  (void)q.Pop();
  EXPECT_DEATH(q.SetTimer(1, 1.0, 2), "before the current simulated time");
}

TEST(EventQueueDeathTest, ReservedEventPushedAfterItWasDueAborts) {
  EventQueue q;
  const uint64_t seq = q.ReserveSeq();  // for time 1.0, but not pushed in time
  q.Push(1.0, 1);
  (void)q.Pop();  // an event after (1.0, seq) popped
  EXPECT_DEATH(q.PushReserved(1.0, seq, 2), "after it was due");
  EXPECT_DEATH(q.PushReserved(2.0, seq + 5, 2), "not from ReserveSeq");
}

TEST(EventQueueDeathTest, BucketWidthMustBePositiveAndSetWhileEmpty) {
  EventQueue q;
  EXPECT_DEATH(q.SetBucketWidth(0), "bucket width must be positive and finite");
  EXPECT_DEATH(q.SetBucketWidth(std::numeric_limits<double>::infinity()),
               "bucket width must be positive and finite");
  q.Push(1.0, 1);
  EXPECT_DEATH(q.SetBucketWidth(1e-3), "before any push");
}

TEST(EventQueueDeathTest, PopEmptyAborts) {
  EventQueue q;
  EXPECT_DEATH((void)q.Pop(), "empty event queue");
}

}  // namespace
}  // namespace dualpath::sim
