#include "kv/sha256.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace dualpath::kv::sha256 {
namespace {

// Reference: OpenSSL's EVP one-shot digest (independent of both paths under test).
std::array<uint8_t, 32> EvpSha256(const std::vector<uint8_t>& msg) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  EXPECT_EQ(EVP_Digest(msg.data(), msg.size(), out.data(), &len, EVP_sha256(), nullptr), 1);
  EXPECT_EQ(len, 32u);
  return out;
}

using DigestFn = void (*)(const void*, size_t, uint8_t*);

void CheckAgainstOpenSsl(DigestFn fn) {
  std::mt19937_64 rng(31337);
  // Every length 0..300 (covers every padding case: 55/56/63/64/119/120 boundaries), with random
  // bytes, twice each.
  for (int rep = 0; rep < 2; ++rep) {
    for (size_t len = 0; len <= 300; ++len) {
      std::vector<uint8_t> msg(len);
      for (uint8_t& b : msg) b = static_cast<uint8_t>(rng());
      std::array<uint8_t, 32> got{};
      fn(msg.data(), msg.size(), got.data());
      ASSERT_EQ(got, EvpSha256(msg)) << "length " << len;
    }
  }
  // Known answer: SHA-256("abc").
  std::array<uint8_t, 32> abc{};
  fn("abc", 3, abc.data());
  const std::array<uint8_t, 32> want = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea,
                                        0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
                                        0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c,
                                        0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
  EXPECT_EQ(abc, want);
}

TEST(Sha256Test, ShaNiMatchesOpenSslForLengths0To300) {
  if (!HaveShaNi()) GTEST_SKIP() << "CPU lacks SHA-NI";
  CheckAgainstOpenSsl(&DigestShaNi);
}

TEST(Sha256Test, OpenSslPathMatchesEvpForLengths0To300) { CheckAgainstOpenSsl(&DigestOpenSsl); }

// Longer messages through NiState directly, fed in uneven pieces, so AbsorbBlocks' tail handling
// is exercised at every offset.
TEST(Sha256Test, ShaNiStreamingMatchesOpenSsl) {
  if (!HaveShaNi()) GTEST_SKIP() << "CPU lacks SHA-NI";
  std::mt19937_64 rng(7);
  for (size_t len : {0u, 1u, 63u, 64u, 65u, 1000u, 4099u}) {
    std::vector<uint8_t> msg(len);
    for (uint8_t& b : msg) b = static_cast<uint8_t>(rng());
    NiState st;
    alignas(64) uint8_t buf[256 + kPadRoom];
    size_t fill = 0;
    size_t off = 0;
    while (off < len) {
      const size_t take = std::min<size_t>({len - off, 1 + rng() % 150, 256 - fill});
      std::memcpy(buf + fill, msg.data() + off, take);
      fill += take;
      off += take;
      st.AbsorbBlocks(buf, &fill);
      ASSERT_LT(fill, kBlockBytes);
    }
    std::array<uint8_t, 32> got{};
    st.Finish(buf, fill, got.data());
    EXPECT_EQ(got, EvpSha256(msg)) << "length " << len;
  }
}

TEST(Sha256Test, ForceImplSwitchesAndResets) {
  ForceImpl(Impl::kOpenSsl);
  EXPECT_EQ(ActiveImpl(), Impl::kOpenSsl);
  ResetImpl();
  EXPECT_EQ(ActiveImpl(), HaveShaNi() ? Impl::kShaNi : Impl::kOpenSsl);
}

}  // namespace
}  // namespace dualpath::kv::sha256
