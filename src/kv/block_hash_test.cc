#include "dualpath/kv/block_hash.h"

#include <gtest/gtest.h>

#include <sstream>
#include <unordered_set>

namespace dualpath::kv {
namespace {

BlockHash Sample() {
  BlockHash h;
  for (size_t i = 0; i < h.bytes.size(); ++i) h.bytes[i] = static_cast<uint8_t>(i * 9 + 1);
  return h;
}

TEST(BlockHashTest, HexRoundTrip) {
  const BlockHash h = Sample();
  const std::string hex = h.Hex();
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.substr(0, 8), "010a131c");
  Result<BlockHash> back = BlockHash::FromHex(hex);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, h);
}

TEST(BlockHashTest, FromHexAcceptsUppercase) {
  const BlockHash h = Sample();
  std::string hex = h.Hex();
  for (char& c : hex) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  Result<BlockHash> back = BlockHash::FromHex(hex);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, h);
}

TEST(BlockHashTest, FromHexRejectsBadInput) {
  EXPECT_EQ(BlockHash::FromHex("abc").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(BlockHash::FromHex(std::string(66, 'a')).status().code(), Code::kInvalidArgument);
  std::string bad(64, '0');
  bad[17] = 'g';
  Result<BlockHash> r = BlockHash::FromHex(bad);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("position 17"), std::string::npos) << r.status().message();
}

TEST(BlockHashTest, OrderingEqualityAndZero) {
  BlockHash a, b;
  EXPECT_TRUE(a.IsZero());
  EXPECT_EQ(a, b);
  b.bytes[31] = 1;
  EXPECT_FALSE(b.IsZero());
  EXPECT_LT(a, b);
  a.bytes[0] = 1;
  EXPECT_GT(a, b);  // lexicographic: first byte dominates
}

TEST(BlockHashTest, Prefix64AndStdHash) {
  BlockHash h;
  h.bytes[0] = 0x01;
  h.bytes[7] = 0x80;
  EXPECT_EQ(h.Prefix64(), 0x8000000000000001ULL);
  EXPECT_EQ(std::hash<BlockHash>{}(h), static_cast<size_t>(h.Prefix64()));
  std::unordered_set<BlockHash> set;
  set.insert(h);
  set.insert(Sample());
  set.insert(h);
  EXPECT_EQ(set.size(), 2u);
  EXPECT_TRUE(set.contains(Sample()));
}

TEST(BlockHashTest, StreamsAsHex) {
  std::ostringstream os;
  os << Sample();
  EXPECT_EQ(os.str(), Sample().Hex());
}

}  // namespace
}  // namespace dualpath::kv
