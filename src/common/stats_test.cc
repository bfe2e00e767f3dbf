#include "dualpath/common/stats.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dualpath {
namespace {

TEST(Percentile, IsNearestRank) {
  EXPECT_EQ(Percentile(std::vector<double>{}, 0.5), 0);
  EXPECT_EQ(Percentile(std::vector<double>{3, 1, 2}, 0.5), 2);
  EXPECT_EQ(Percentile(std::vector<double>{1, 2, 3, 4}, 0.5), 2);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted input
  EXPECT_EQ(Percentile(v, 0.99), 99);
  EXPECT_EQ(Percentile(v, 1.0), 100);
  EXPECT_EQ(Percentile(v, 0.0), 1);
  EXPECT_EQ(Percentile(v, 0.5), 50);
}

TEST(Percentile, P99OfALargeSampleIsTheRankAtOrAbove99Percent) {
  // 1000 values: rank ceil(990) = 990 -> value 990; 1001 values: ceil(990.99) = 991.
  std::vector<int64_t> v;
  for (int64_t i = 1; i <= 1000; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 0.99), 990);
  v.push_back(1001);
  EXPECT_EQ(Percentile(v, 0.99), 991);
}

TEST(Percentile, ClampsQAndKeepsTheElementType) {
  const std::vector<float> v = {0.25f, 0.5f, 0.125f};
  EXPECT_EQ(Percentile(v, -1.0), 0.125f);
  EXPECT_EQ(Percentile(v, 2.0), 0.5f);
  EXPECT_EQ(NearestRankIndex(1, 0.99), 0u);
  EXPECT_EQ(NearestRankIndex(4, 0.5), 1u);
  EXPECT_EQ(NearestRankIndex(5, 0.5), 2u);
}
}  // namespace
}  // namespace dualpath
