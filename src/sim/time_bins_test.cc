#include "sim/time_bins.h"

#include <gtest/gtest.h>

#include <random>

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

// AddSpreadTogether (issue 27) against one AddSpread per series: on random increasing intervals,
// some far enough out to merge windows, every value is the same double (the simulator's JSON is
// byte-identical only if they are).
TEST(TimeBinsTest, SpreadTogetherGivesTheValuesOfSeparateSpreads) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    TimeBins a(0.25), b(0.25), c(0.25);     // together
    TimeBins a1(0.25), b1(0.25), c1(0.25);  // one by one
    double t = 0;
    for (int i = 0; i < 5'000; ++i) {
      // Mostly short intervals; now and then a jump that merges windows.
      t += rng() % 500 == 0 ? 1e3 * (1 + u(rng)) * static_cast<double>(1 + i) : u(rng) * 0.7;
      const double from = t;
      const double to = t + (rng() % 4 == 0 ? 0.0 : u(rng) * 2.0);
      const double ra = u(rng) * 100, rc = u(rng) * 1e-3;
      TimeBins* const series[] = {&a, &b, &c};
      const double rates[] = {ra, 1.0, rc};
      TimeBins::AddSpreadTogether(series, from, to, rates);
      a1.AddSpread(from, to, ra);
      b1.AddSpread(from, to, 1.0);
      c1.AddSpread(from, to, rc);
      t = to;
    }
    EXPECT_GT(a.width(), 0.25);  // windows were merged on the way
    ASSERT_EQ(a.width(), a1.width());
    ASSERT_EQ(b.width(), b1.width());
    ASSERT_EQ(c.width(), c1.width());
    EXPECT_EQ(a.values(), a1.values());  // exact: same doubles
    EXPECT_EQ(b.values(), b1.values());
    EXPECT_EQ(c.values(), c1.values());
  }
}

TEST(TimeBinsDeathTest, SpreadTogetherNeedsSeriesWithTheSameWindows) {
  TimeBins a(1.0), b(2.0);
  TimeBins* const series[] = {&a, &b};
  const double rates[] = {1.0, 1.0};
  EXPECT_DEATH(TimeBins::AddSpreadTogether(series, 0, 1, rates), "same windows");
}

}  // namespace
}  // namespace dualpath::sim
