#include "storage/lru_index.h"

#include <gtest/gtest.h>

#include "storage/test_util.h"

namespace dualpath::storage::internal {
namespace {

using storage::testing::HashOf;

TEST(LruIndexTest, VictimsAreOldestFirstAndSkipProtected) {
  LruIndex idx;
  for (uint64_t i = 0; i < 4; ++i) {
    idx.Insert(HashOf(i), 10);
  }
  EXPECT_EQ(idx.total_bytes(), 40u);
  EXPECT_TRUE(idx.Touch(HashOf(0)));  // order now (old→new): 1 2 3 0
  auto v = idx.Victims(25, 0, HashOf(1));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], HashOf(2));
  EXPECT_EQ(v[1], HashOf(3));
  EXPECT_TRUE(idx.Victims(40, 0, HashOf(9)).empty());
  EXPECT_EQ(idx.Victims(40, 5, HashOf(9)).size(), 1u);
}

TEST(LruIndexTest, ReinsertUpdatesBytesAndEraseForgets) {
  LruIndex idx;
  idx.Insert(HashOf(1), 10);
  idx.Insert(HashOf(1), 30);
  EXPECT_EQ(idx.size(), 1u);
  EXPECT_EQ(idx.total_bytes(), 30u);
  EXPECT_TRUE(idx.Erase(HashOf(1)));
  EXPECT_FALSE(idx.Erase(HashOf(1)));
  EXPECT_FALSE(idx.Touch(HashOf(1)));
  EXPECT_EQ(idx.total_bytes(), 0u);
}

}  // namespace
}  // namespace dualpath::storage::internal
