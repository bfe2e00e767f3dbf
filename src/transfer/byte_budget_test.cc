#include "dualpath/transfer/byte_budget.h"

#include <gtest/gtest.h>

namespace dualpath::transfer {
namespace {

TEST(ByteBudgetTest, AdmitsUpToTheLimit) {
  ByteBudget b(100);
  EXPECT_TRUE(b.TryAcquire(60));
  EXPECT_TRUE(b.TryAcquire(40));
  EXPECT_EQ(b.in_flight(), 100u);
  EXPECT_FALSE(b.TryAcquire(1));
  b.Release(40);
  EXPECT_FALSE(b.TryAcquire(41));
  EXPECT_TRUE(b.TryAcquire(40));
}

TEST(ByteBudgetTest, OversizedRequestGoesAloneNeverStarves) {
  ByteBudget b(100);
  EXPECT_TRUE(b.TryAcquire(10));
  EXPECT_FALSE(b.TryAcquire(500));  // does not fit while something is in flight
  b.Release(10);
  EXPECT_TRUE(b.TryAcquire(500));  // admitted alone
  EXPECT_FALSE(b.TryAcquire(1));   // and nothing else joins it
  b.Release(500);
  EXPECT_EQ(b.in_flight(), 0u);
}

TEST(ByteBudgetTest, ZeroMeansUnlimited) {
  ByteBudget b(0);
  EXPECT_TRUE(b.TryAcquire(1ull << 40));
  EXPECT_TRUE(b.TryAcquire(1ull << 40));
  EXPECT_EQ(b.in_flight(), 2ull << 40);
}

TEST(ByteBudgetDeathTest, ReleasingMoreThanInFlightAborts) {
  ByteBudget b(100);
  ASSERT_TRUE(b.TryAcquire(10));
  EXPECT_DEATH(b.Release(11), "more bytes than are in flight");
}

}  // namespace
}  // namespace dualpath::transfer
