#include "sched/min_index.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace dualpath::sched {
namespace {

// The rule MinIndex replaces (phase 1's scan): the first index holding the smallest key.
size_t ScanMin(const std::vector<int64_t>& keys) {
  size_t best = 0;
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] < keys[best]) best = i;
  }
  return best;
}

TEST(MinIndexTest, TiesGoToTheLowerIndex) {
  MinIndex m;
  m.Reset(5);
  EXPECT_EQ(m.Min(), 0u);  // all 0
  m.Set(0, 7);
  EXPECT_EQ(m.Min(), 1u);
  m.Set(1, 7);
  m.Set(2, 7);
  m.Set(3, 3);
  m.Set(4, 3);
  EXPECT_EQ(m.Min(), 3u);
  m.Add(3, 4);  // 7 7 7 7 3
  EXPECT_EQ(m.Min(), 4u);
  m.Add(4, 4);  // all 7: the first
  EXPECT_EQ(m.Min(), 0u);
  EXPECT_EQ(m.key(4), 7);
}

TEST(MinIndexTest, OneEntryAndNegativeKeys) {
  MinIndex m;
  m.Reset(1);
  EXPECT_EQ(m.Min(), 0u);
  m.Set(0, -5);
  EXPECT_EQ(m.Min(), 0u);
  m.Reset(3);  // padded to 4 leaves: the padding never wins, even against the largest key
  m.Set(0, INT64_MAX);
  m.Set(1, INT64_MAX);
  m.Set(2, INT64_MAX);
  EXPECT_EQ(m.Min(), 0u);
  m.Set(2, -1);
  EXPECT_EQ(m.Min(), 2u);
}

// Random updates over sizes that are and are not powers of two (96: the decode groups of 48P96D),
// with keys from a small range so ties are frequent: always the scan's answer.
TEST(MinIndexTest, AgreesWithAScanOnRandomUpdates) {
  std::mt19937_64 rng(27);
  for (size_t n : {1u, 2u, 3u, 7u, 8u, 96u, 130u}) {
    MinIndex m;
    m.Reset(n);
    std::vector<int64_t> keys(n, 0);
    for (int step = 0; step < 5000; ++step) {
      const size_t i = rng() % n;
      if (rng() % 2 == 0) {
        keys[i] = static_cast<int64_t>(rng() % 8) - 2;
        m.Set(i, keys[i]);
      } else {
        const int64_t d = static_cast<int64_t>(rng() % 5) - 2;
        keys[i] += d;
        m.Add(i, d);
      }
      ASSERT_EQ(m.Min(), ScanMin(keys)) << "n=" << n << " step " << step;
      ASSERT_EQ(m.key(i), keys[i]);
    }
  }
}

}  // namespace
}  // namespace dualpath::sched
