#include "dualpath/sim/event_queue.h"

#include <gtest/gtest.h>

#include <random>

#include "sim/binary_heap_event_queue.h"

namespace dualpath::sim {
namespace {

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
        ASSERT_NE(q.Peek(), nullptr);
        const Event peeked = *q.Peek();
        const Event x = q.Pop();
        const Event y = ref.Pop();
        ASSERT_EQ(x.seq, y.seq) << "seed " << seed << " pop " << pops;
        ASSERT_EQ(x.time, y.time);
        ASSERT_EQ(x.kind, y.kind);
        ASSERT_EQ(x.a, y.a);
        ASSERT_EQ(x.b, y.b);
        ASSERT_EQ(peeked.seq, x.seq);  // Peek() is what Pop() returns
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

TEST(EventQueueDeathTest, PushInThePastAborts) {
  EventQueue q;
  q.Push(2.0, 1);
  (void)q.Pop();
  EXPECT_DEATH(q.Push(1.0, 2), "before the current simulated time");
}

TEST(EventQueueDeathTest, PopEmptyAborts) {
  EventQueue q;
  EXPECT_DEATH((void)q.Pop(), "empty event queue");
}

}  // namespace
}  // namespace dualpath::sim
