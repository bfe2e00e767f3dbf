#include "sim/time_bins.h"

#include <gtest/gtest.h>

namespace dualpath::sim {
namespace {

TEST(TimeBinsTest, SpreadsOverTheWindowsAnIntervalOverlaps) {
  TimeBins b(1.0);
  b.AddSpread(0.5, 2.5, 10);  // 5 in [0,1), 10 in [1,2), 5 in [2,3)
  ASSERT_EQ(b.values().size(), 3u);
  EXPECT_DOUBLE_EQ(b.values()[0], 5);
  EXPECT_DOUBLE_EQ(b.values()[1], 10);
  EXPECT_DOUBLE_EQ(b.values()[2], 5);
  EXPECT_EQ(b.width(), 1.0);
}

// Issue 19: a time of 1e8 s (or 1e300) must not allocate a window per second.
TEST(TimeBinsTest, FarTimesWidenTheWindowsInsteadOfGrowingMemory) {
  TimeBins b(1.0);
  b.AddSpread(0, 1, 3);
  b.AddSpread(1e8, 1e8 + 1, 7);
  EXPECT_LE(b.values().size(), TimeBins::kMaxWindows);
  EXPECT_GE(b.width(), 1e8 / static_cast<double>(TimeBins::kMaxWindows));
  double total = 0;
  for (double v : b.values()) total += v;
  EXPECT_DOUBLE_EQ(total, 10);  // merging keeps every integral
  EXPECT_DOUBLE_EQ(b.values().front(), 3);

  b.AddSpread(1e300, 1e300, 1);  // an empty interval that far out still bounds memory
  EXPECT_LE(b.values().size(), TimeBins::kMaxWindows);
}

TEST(TimeBinsTest, OneLongIntervalIsBoundedToo) {
  TimeBins b(0.001);
  b.AddSpread(0, 1e12, 1);
  EXPECT_LE(b.values().size(), TimeBins::kMaxWindows);
  double total = 0;
  for (double v : b.values()) total += v;
  EXPECT_NEAR(total, 1e12, 1e12 * 1e-9);
}

TEST(TimeBinsTest, CoarsenToLinesUpSeriesOfTheSameInitialWidth) {
  TimeBins a(0.5), b(0.5);
  a.AddSpread(0, 4, 1);
  b.AddSpread(0, 3e5, 1);
  ASSERT_GT(b.width(), a.width());
  a.CoarsenTo(b.width());
  EXPECT_EQ(a.width(), b.width());
  EXPECT_DOUBLE_EQ(a.values()[0], 4);
  // And to fit a span in kMaxWindows even where nothing was recorded.
  TimeBins c(1.0);
  c.CoarsenTo(1.0, 1e9);
  EXPECT_LT(1e9 / c.width(), static_cast<double>(TimeBins::kMaxWindows));
}

}  // namespace
}  // namespace dualpath::sim
