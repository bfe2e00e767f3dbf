#include "dualpath/kv/cbor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kv/cbor_encode.h"

namespace dualpath::kv::cbor {
namespace {

std::string Hex(const std::string& s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xF];
  }
  return out;
}

std::string Unsigned(uint64_t v) {
  std::string s;
  AppendUnsigned(v, &s);
  return Hex(s);
}

// RFC 8949 Appendix A examples: the shortest head at every width boundary.
TEST(CborTest, UnsignedWidths) {
  EXPECT_EQ(Unsigned(0), "00");
  EXPECT_EQ(Unsigned(23), "17");
  EXPECT_EQ(Unsigned(24), "1818");
  EXPECT_EQ(Unsigned(255), "18ff");
  EXPECT_EQ(Unsigned(256), "190100");
  EXPECT_EQ(Unsigned(65535), "19ffff");
  EXPECT_EQ(Unsigned(65536), "1a00010000");
  EXPECT_EQ(Unsigned(1000000), "1a000f4240");
  EXPECT_EQ(Unsigned(4294967295ULL), "1affffffff");
  EXPECT_EQ(Unsigned(4294967296ULL), "1b0000000100000000");
  EXPECT_EQ(Unsigned(1000000000000ULL), "1b000000e8d4a51000");
  EXPECT_EQ(Unsigned(18446744073709551615ULL), "1bffffffffffffffff");
}

TEST(CborTest, StringsArraysNull) {
  std::string s;
  AppendText("IETF", &s);
  EXPECT_EQ(Hex(s), "6449455446");
  s.clear();
  AppendBytes(std::string("\x01\x02\x03\x04", 4), &s);
  EXPECT_EQ(Hex(s), "4401020304");
  s.clear();
  AppendArrayHead(3, &s);
  AppendUnsigned(1, &s);
  AppendUnsigned(2, &s);
  AppendUnsigned(3, &s);
  EXPECT_EQ(Hex(s), "83010203");
  s.clear();
  AppendArrayHead(25, &s);
  EXPECT_EQ(Hex(s), "9819");
  s.clear();
  AppendNull(&s);
  EXPECT_EQ(Hex(s), "f6");
  s.clear();
  AppendBytes(std::string(32, '\0'), &s);
  EXPECT_EQ(Hex(s).substr(0, 4), "5820");
}

TEST(CborTest, WriteHeadReturnsLength) {
  uint8_t buf[kMaxHeadBytes];
  EXPECT_EQ(WriteHead(Major::kUnsigned, 23, buf), 1u);
  EXPECT_EQ(WriteHead(Major::kArray, 255, buf), 2u);
  EXPECT_EQ(buf[0], 0x98);
  EXPECT_EQ(WriteHead(Major::kTextString, 65535, buf), 3u);
  EXPECT_EQ(WriteHead(Major::kByteString, 65536, buf), 5u);
  EXPECT_EQ(WriteHead(Major::kUnsigned, 1ULL << 40, buf), 9u);
}

// The branchless token encoder must agree with WriteHead at every boundary and on random values.
TEST(CborTest, BranchlessUint32MatchesWriteHead) {
  std::vector<uint32_t> values = {0,        1,        23,         24,        25,    255,
                                  256,      257,      65535,      65536,     65537, 16777215,
                                  16777216, 1u << 31, 0x7FFFFFFF, 0xFFFFFFFF};
  uint64_t x = 42;
  for (int i = 0; i < 10000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    values.push_back(static_cast<uint32_t>(x >> (32 + (i % 32))));  // all magnitudes
  }
  for (uint32_t v : values) {
    uint8_t want[kMaxHeadBytes] = {};
    uint8_t got[16] = {};
    const size_t n = WriteHead(Major::kUnsigned, v, want);
    ASSERT_EQ(WriteUint32Branchless(v, got), n) << v;
    ASSERT_EQ(0, std::memcmp(want, got, n)) << v;
  }
}

// Both bulk encoders produce exactly the per-value canonical encoding, for every length (tails
// shorter than the 8-value vector step included) and every width class.
TEST(CborTest, BulkEncodersMatchPerValueEncoding) {
  uint64_t x = 7;
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{64}, size_t{401}}) {
    std::vector<uint32_t> values(n);
    for (size_t i = 0; i < n; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      values[i] = static_cast<uint32_t>(x >> (32 + (x >> 59)));  // shifts 32..63: all widths
    }
    std::string want;
    uint32_t want_or = 0;
    for (uint32_t v : values) {
      AppendUnsigned(v, &want);
      want_or |= v;
    }
    std::vector<uint8_t> out(5 * n + kEncodeSlack);
    uint32_t got_or = 1;
    size_t len = EncodeUint32sScalar(values.data(), n, out.data(), &got_or);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), len), want) << n;
    EXPECT_EQ(got_or, want_or);
    got_or = 1;
    len = EncodeUint32s(values.data(), n, out.data(), &got_or);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), len), want) << n;
    EXPECT_EQ(got_or, want_or);
    if (HaveAvx512Encoder()) {
      std::fill(out.begin(), out.end(), 0xCC);
      got_or = 1;
      len = EncodeUint32sAvx512(values.data(), n, out.data(), &got_or);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), len), want) << n;
      EXPECT_EQ(got_or, want_or);
    }
  }
}

}  // namespace
}  // namespace dualpath::kv::cbor
