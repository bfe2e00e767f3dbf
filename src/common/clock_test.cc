#include "dualpath/common/clock.h"

#include <gtest/gtest.h>

namespace dualpath {
namespace {

TEST(ClockTest, SteadyIsMonotonic) {
  Clock& c = SteadyClock::Default();
  Nanos a = c.Now();
  Nanos b = c.Now();
  EXPECT_GE(b, a);
  EXPECT_GT(a, 0);
}

TEST(ClockTest, ManualMovesOnlyWhenTold) {
  ManualClock c(100);
  EXPECT_EQ(c.Now(), 100);
  EXPECT_EQ(c.Now(), 100);
  c.Advance(5 * kNanosPerMilli);
  EXPECT_EQ(c.Now(), 100 + 5'000'000);
  c.Set(10 * kNanosPerSecond);
  EXPECT_EQ(c.Now(), 10'000'000'000);
  c.Advance(0);
  EXPECT_EQ(c.Now(), 10'000'000'000);
}

TEST(ClockTest, Conversions) {
  EXPECT_DOUBLE_EQ(ToSeconds(1'500'000'000), 1.5);
  EXPECT_EQ(FromSeconds(0.25), 250'000'000);
  EXPECT_EQ(kNanosPerMicro * 1000, kNanosPerMilli);
}

TEST(ClockDeathTest, ManualRefusesToGoBack) {
  ManualClock c(100);
  EXPECT_DEATH(c.Advance(-1), "cannot go backwards");
  EXPECT_DEATH(c.Set(50), "to the past");
}

}  // namespace
}  // namespace dualpath
