#include "dualpath/common/splitmix.h"

#include <gtest/gtest.h>

namespace dualpath {
namespace {

TEST(SplitMix64, MatchesTheReferenceStream) {
  // Reference values of splitmix64 seeded with 0 (Vigna's splitmix64.c).
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454fULL);
  // Next() is Mix() of the advanced state.
  EXPECT_EQ(SplitMix64(41).Next(), SplitMix64::Mix(41 + SplitMix64::kGamma));
}

}  // namespace
}  // namespace dualpath
