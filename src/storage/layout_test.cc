#include "dualpath/storage/layout.h"

#include <gtest/gtest.h>

#include "storage/test_util.h"

namespace dualpath::storage {
namespace {

using testing::HashOf;

TEST(LayoutTest, BlockNamesRoundTrip) {
  kv::BlockHash h = HashOf(3);
  std::string path = BlockPath("/r/m", h);
  std::string name = path.substr(path.rfind('/') + 1);
  auto parsed = ParseBlockFileName(name);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, h);
  EXPECT_FALSE(ParseBlockFileName("zz" + name.substr(2)));
  EXPECT_FALSE(ParseBlockFileName(name + ".x"));
  EXPECT_FALSE(ParseBlockFileName("quarantine"));
}

TEST(LayoutTest, TmpNamesRoundTripWithDottedHost) {
  kv::BlockHash h = HashOf(4);
  std::string path = TmpPath("/r/m", h, "node.a", 1234, 7);
  EXPECT_EQ(path.substr(0, BlockDir("/r/m", h).size()), BlockDir("/r/m", h));
  auto t = ParseTmpFileName(path.substr(path.rfind('/') + 1));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->hash, h);
  EXPECT_EQ(t->host, "node.a");
  EXPECT_EQ(t->pid, 1234);
  EXPECT_FALSE(ParseTmpFileName("." + h.Hex() + ".tmp.host.x.1"));
  EXPECT_FALSE(ParseTmpFileName(h.Hex() + ".kvb"));
}

}  // namespace
}  // namespace dualpath::storage
