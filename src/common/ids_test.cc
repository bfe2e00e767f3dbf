#include "dualpath/common/ids.h"

#include <gtest/gtest.h>

#include <sstream>
#include <type_traits>
#include <unordered_set>

namespace dualpath {
namespace {

TEST(IdsTest, DistinctTypesDoNotConvert) {
  static_assert(!std::is_convertible_v<RequestId, EngineId>);
  static_assert(!std::is_convertible_v<uint64_t, RequestId>);
  static_assert(std::is_constructible_v<RequestId, uint64_t>);
  EXPECT_EQ(RequestId(3).value(), 3u);
  EXPECT_EQ(EngineId().value(), 0u);
}

TEST(IdsTest, CompareHashPrint) {
  EXPECT_LT(NodeId(1), NodeId(2));
  EXPECT_EQ(LayerIdx(4), LayerIdx(4));
  EXPECT_NE(SessionId(4), SessionId(5));
  std::unordered_set<RequestId> set{RequestId(1), RequestId(2), RequestId(1)};
  EXPECT_EQ(set.size(), 2u);
  std::ostringstream os;
  os << EngineId(17);
  EXPECT_EQ(os.str(), "17");
}

}  // namespace
}  // namespace dualpath
