// UniformFromBits: one 64-bit random draw as a uniform double in [0, 1).
//
// The value std::uniform_real_distribution<double>(0, 1) returns for a std::mt19937_64 with
// libstdc++ (generate_canonical<double, 53>: one draw converted to double, divided by 2^64, and
// the largest double below 1 where that rounds up to 1), without that implementation's
// long-double arithmetic and its branch on the draw's top bit (issue 27: together ~2 % of a
// 48P96D simulation), and pinned: a simulation's draws no longer depend on the standard
// library's choice of algorithm.
// simulator_test.cc checks it against the standard distribution.
#pragma once

#include <cstdint>

namespace dualpath::sim {

inline double UniformFromBits(uint64_t bits) {
  // The draw as a double, rounded once: its halves convert exactly (each < 2^32) and their sum
  // rounds as the direct conversion does. Without AVX-512, an unsigned 64-bit conversion is a
  // branch on the top bit, mispredicted on half the draws (measured in the simulator). Scaling by
  // 2^-64 is exact (a power of two, far from the subnormals), as libstdc++'s x / 2^64 is.
  const double x = static_cast<double>(static_cast<int64_t>(bits >> 32)) * 0x1p32 +
                   static_cast<double>(static_cast<int64_t>(bits & 0xffffffffU));
  const double u = x * 0x1p-64;
  constexpr double kBelowOne = 0x1.fffffffffffffp-1;  // std::nextafter(1.0, 0.0)
  return u < 1.0 ? u : kBelowOne;
}

}  // namespace dualpath::sim
