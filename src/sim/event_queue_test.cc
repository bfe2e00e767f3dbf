#include "dualpath/sim/event_queue.h"

#include <gtest/gtest.h>

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
