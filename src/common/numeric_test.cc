#include "dualpath/common/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dualpath {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(CheckedArithmetic, MulDetectsOverflow) {
  EXPECT_EQ(CheckedMul(0, kMax), 0u);
  EXPECT_EQ(CheckedMul(uint64_t{1} << 32, (uint64_t{1} << 32) - 1),
            (uint64_t{1} << 32) * ((uint64_t{1} << 32) - 1));
  EXPECT_FALSE(CheckedMul(uint64_t{1} << 32, uint64_t{1} << 32).has_value());
  EXPECT_FALSE(CheckedMul(kMax, 2).has_value());
  EXPECT_EQ(CheckedMul(kMax, 1), kMax);
}

TEST(CheckedArithmetic, AddDetectsOverflow) {
  EXPECT_EQ(CheckedAdd(kMax - 1, 1), kMax);
  EXPECT_FALSE(CheckedAdd(kMax, 1).has_value());
  EXPECT_FALSE(CheckedAdd(kMax / 2 + 1, kMax / 2 + 1).has_value());
}

TEST(CheckRange, AcceptsTheClosedRange) {
  EXPECT_TRUE(CheckRange("x", 1, 1, 10, "s").ok());
  EXPECT_TRUE(CheckRange("x", 10, 1, 10, "s").ok());
  EXPECT_TRUE(CheckRange("x", 5.5, 1, 10, "s").ok());
  EXPECT_TRUE(CheckCountRange("n", 0, 0, kMax, "").ok());
  EXPECT_TRUE(CheckCountRange("n", kMax, 0, kMax, "").ok());
}

TEST(CheckRange, RejectsOutsideNamingFieldValueRangeAndUnit) {
  const Status s = CheckRange("hardware.snic_gbps", 1e-9, 1, 10000, "Gbit/s", Code::kSimBadConfig);
  EXPECT_EQ(s.code(), Code::kSimBadConfig);
  EXPECT_EQ(s.message(), "hardware.snic_gbps = 1e-09 is outside [1, 10000] Gbit/s");
  const Status c = CheckCountRange("output_length", kMax, 0, uint64_t{1} << 30, "tokens");
  EXPECT_EQ(c.code(), Code::kInvalidArgument);
  EXPECT_EQ(c.message(), "output_length = 18446744073709551615 is outside [0, 1073741824] tokens");
  EXPECT_EQ(CheckRange("t", 1e308, 0, 1e6, "").message(), "t = 1e+308 is outside [0, 1000000]");
}

TEST(CheckRange, RejectsNonFinite) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(CheckRange("x", std::nan(""), -inf, inf, "").ok());
  EXPECT_FALSE(CheckRange("x", inf, 0, 1e300, "").ok());
  EXPECT_FALSE(CheckRange("x", -inf, -1e300, 0, "").ok());
}

TEST(FormatNumber, WholeNumbersInFullOthersShort) {
  EXPECT_EQ(FormatNumber(65536), "65536");
  EXPECT_EQ(FormatNumber(0.25), "0.25");
  EXPECT_EQ(FormatNumber(1e20), "1e+20");
  EXPECT_EQ(FormatNumber(-3), "-3");
}

}  // namespace
}  // namespace dualpath
