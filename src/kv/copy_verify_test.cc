#include "dualpath/kv/copy_verify.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dualpath/kv/block_file.h"
#include "lib/random_bytes.h"

namespace dualpath::kv {
namespace {

using dualpath::testlib::RandomBytes;

// The streaming AVX2 path and the plain path must both copy exactly and return BlockChecksum
// with the same seed, for every size class and every destination misalignment.
TEST(CopyAndChecksumTest, CopiesExactlyAndMatchesBlockChecksum) {
  const std::vector<size_t> sizes = {0, 1, 63, 64 << 10, (64 << 10) + 1, (256 << 10) + 77, 1 << 20};
  for (size_t n : sizes) {
    const auto src = RandomBytes(n + 64, static_cast<uint32_t>(n));
    for (size_t shift : {0, 1, 16, 31, 33}) {
      std::vector<std::byte> dst(n + 64, std::byte{0});
      const uint64_t seed = 0x5EED0000 + n;
      const uint64_t sum = CopyAndChecksum(src.data() + 3, dst.data() + shift, n, seed);
      EXPECT_EQ(sum, BlockChecksum(std::span(src.data() + 3, n), seed)) << n << " " << shift;
      if (n > 0) {
        EXPECT_NE(sum, BlockChecksum(std::span(src.data() + 3, n), seed + 1));
      }
      EXPECT_EQ(std::memcmp(dst.data() + shift, src.data() + 3, n), 0) << n << " " << shift;
      EXPECT_EQ(dst[n + shift], std::byte{0}) << "wrote past the end";
    }
  }
}

}  // namespace
}  // namespace dualpath::kv
