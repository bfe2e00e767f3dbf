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

// Issue 17: a name from outside (a per-run subdirectory) cannot leave the store, and a block's
// path is made from its hash alone (hex), so it always lies below the model directory.
TEST(LayoutTest, PathComponentsThatEscapeTheStoreAreRejected) {
  EXPECT_TRUE(CheckPathComponent("replay-1-dualpath", "subdir").ok());
  EXPECT_TRUE(CheckPathComponent("..x", "subdir").ok());  // a name, not the parent
  for (std::string_view bad : {std::string_view(""), std::string_view("."), std::string_view(".."),
                               std::string_view("../etc"), std::string_view("a/b"),
                               std::string_view("/abs"), std::string_view("a\0b", 3)}) {
    Status st = CheckPathComponent(bad, "subdir");
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << "'" << bad << "' accepted";
    EXPECT_NE(st.message().find("must be one directory name"), std::string::npos) << st.ToString();
  }
  // A key that is not 64 hex digits never becomes a hash, so never a path.
  EXPECT_FALSE(kv::BlockHash::FromHex("../../../../etc/passwd").ok());
  EXPECT_FALSE(kv::BlockHash::FromHex(std::string(62, 'a') + "/.").ok());
  const std::string path = BlockPath("/r/m", HashOf(9));
  EXPECT_EQ(path.rfind("/r/m/", 0), 0u);
  EXPECT_EQ(path.find(".."), std::string::npos);
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
