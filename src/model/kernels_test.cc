// The fixed-order kernels: Dot and Sum give exactly the bits of the documented 8-lane formula for
// every length (the foundation of chunking invariance), and Exp is accurate and the same in its
// scalar and vector forms.
#include "model/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace dualpath::model::internal {
namespace {

// The formula of kernels.h, written out with scalars.
float LiteralDot(const std::vector<float>& a, const std::vector<float>& b, size_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) l[i % 8] += a[i] * b[i];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

std::vector<float> Values(size_t n, uint64_t seed) {
  // Magnitudes spread over 2^-10 .. 2^10 so a different summation order would show up.
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const float m = static_cast<float>(rng() % 1000000) / 1000000.0f - 0.5f;
    x = std::ldexp(m, static_cast<int>(rng() % 21) - 10);
  }
  return v;
}

TEST(Kernels, DotAndSumFollowTheLaneFormulaForEveryLength) {
  const auto a = Values(67, 1);
  const auto b = Values(67, 2);
  const std::vector<float> ones(67, 1.0f);
  int order_matters = 0;  // lengths where a plain left-to-right sum differs: the test can fail
  for (size_t n = 0; n <= 67; ++n) {
    const float want = LiteralDot(a, b, n);
    EXPECT_TRUE(SameBits(Dot(a.data(), b.data(), n), want)) << "n=" << n;
    EXPECT_TRUE(SameBits(Sum(a.data(), n), LiteralDot(a, ones, n))) << "n=" << n;
    const float* rows[4] = {b.data(), a.data(), ones.data(), b.data()};
    float four[4];
    Dot4(a.data(), rows, n, four);
    EXPECT_TRUE(SameBits(four[0], want)) << "n=" << n;
    EXPECT_TRUE(SameBits(four[1], LiteralDot(a, a, n))) << "n=" << n;
    EXPECT_TRUE(SameBits(four[2], LiteralDot(a, ones, n))) << "n=" << n;
    EXPECT_TRUE(SameBits(four[3], want)) << "n=" << n;
    float seq = 0;
    for (size_t i = 0; i < n; ++i) seq += a[i] * b[i];
    order_matters += !SameBits(seq, want);
  }
  EXPECT_GT(order_matters, 10);
}

TEST(Kernels, Axpy4EqualsFourAxpysAndMaxIsTheMaximum) {
  const auto x = Values(4 * 37, 3);
  const float w[4] = {0.75f, -1.5f, 3.0e-3f, 12.5f};
  for (size_t n = 0; n <= 37; ++n) {
    std::vector<float> one = Values(n, 4);
    std::vector<float> four = one;
    for (int k = 0; k < 4; ++k) Axpy(w[k], x.data() + k * 37, one.data(), n);
    Axpy4(w, x.data(), x.data() + 37, x.data() + 74, x.data() + 111, four.data(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_TRUE(SameBits(one[i], four[i])) << n << " " << i;
    if (n > 0) {
      const auto v = Values(n, 5 + n);
      EXPECT_EQ(Max(v.data(), n), *std::max_element(v.begin(), v.end())) << n;
    }
  }
}

TEST(Kernels, ExpIsAccurateAndScalarEqualsVector) {
  double max_rel = 0;
  std::vector<float> xs;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) xs.push_back(x);
  for (float x : xs) {
    const double want = std::exp(static_cast<double>(x));
    max_rel = std::max(max_rel, std::abs(Exp(x) - want) / want);
  }
  EXPECT_LT(max_rel, 2e-7) << max_rel;    // measured 7.7e-8: under 1 ulp (6e-8) + rounding
  EXPECT_EQ(Exp(0.0f), 1.0f);             // the max score's weight is exactly 1
  EXPECT_EQ(Exp(-1000.0f), Exp(-87.0f));  // clamped, never 0 or denormal
  EXPECT_GT(Exp(-1000.0f), 0.0f);

  std::vector<float> v(xs.begin(), xs.begin() + 23);
  ExpShifted(v.data(), v.size(), 1.5f);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_TRUE(SameBits(v[i], Exp(xs[i] - 1.5f))) << i;
}

TEST(Kernels, SwiGluRowEqualsTheScalarFormula) {
  const auto g = Values(45, 7);
  const auto u = Values(45, 8);
  for (size_t n = 0; n <= 45; ++n) {
    std::vector<float> row(n);
    SwiGluRow(g.data(), u.data(), n, row.data());
    for (size_t i = 0; i < n; ++i)
      EXPECT_TRUE(SameBits(row[i], SwiGlu(g[i], u[i]))) << n << " " << i;
  }
}

}  // namespace
}  // namespace dualpath::model::internal
