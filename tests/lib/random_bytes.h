// RandomBytes: n pseudo-random bytes from a seed, the same bytes for the same (n, seed) on every
// run, for unit tests that copy, checksum or store payloads and compare them byte for byte.
//
// Thread safety: a free function with no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace dualpath::testlib {

inline std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) {
    b = static_cast<std::byte>(rng());
  }
  return v;
}

}  // namespace dualpath::testlib
