#include "sched/gallop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace dualpath::sched {
namespace {

size_t Reference(const std::vector<int64_t>& keys, int64_t limit) {
  return static_cast<size_t>(std::upper_bound(keys.begin(), keys.end(), limit) - keys.begin());
}

TEST(GallopUpperBound, AnswersLikeUpperBoundFromEveryGuess) {
  std::mt19937_64 rng(27);
  for (int round = 0; round < 300; ++round) {
    const size_t n = rng() % 200;
    std::vector<int64_t> keys(n);
    int64_t total = 0;
    for (auto& k : keys) {
      total += static_cast<int64_t>(rng() % 4);  // repeats (needs of 0) included
      k = total;
    }
    const auto key = [&](size_t i) {
      EXPECT_LT(i, n);
      return keys[i];
    };
    for (int64_t limit = -1; limit <= total + 1; ++limit) {
      const size_t want = Reference(keys, limit);
      for (size_t hint : {size_t{0}, want, n / 2, n, n + 5, static_cast<size_t>(rng() % (n + 1))}) {
        ASSERT_EQ(GallopUpperBound(n, hint, limit, key), want)
            << "n " << n << " limit " << limit << " hint " << hint;
      }
    }
  }
}

TEST(GallopUpperBound, ANearGuessProbesLittle) {
  std::vector<int64_t> keys(1 << 16);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i);
  size_t probes = 0;
  const auto key = [&](size_t i) {
    ++probes;
    return keys[i];
  };
  // The answer is 40001; guesses one below and three above it.
  EXPECT_EQ(GallopUpperBound(keys.size(), 40000, 40000, key), 40001u);
  EXPECT_LE(probes, 3u);
  probes = 0;
  EXPECT_EQ(GallopUpperBound(keys.size(), 40004, 40000, key), 40001u);
  EXPECT_LE(probes, 5u);
  // A whole-range binary search takes 16 or 17.
  probes = 0;
  EXPECT_EQ(GallopUpperBound(keys.size(), 0, 40000, key), 40001u);
  EXPECT_GE(probes, 16u);
}

}  // namespace
}  // namespace dualpath::sched
