#include "dualpath/common/check.h"

#include <gtest/gtest.h>

namespace dualpath {
namespace {

TEST(CheckDeathTest, CheckAbortsWithMessage) {
  int refcount = 0;
  EXPECT_DEATH(DUALPATH_CHECK(refcount > 0, "refcount underflow"),
               "check failed: refcount > 0: refcount underflow");
  EXPECT_DEATH(DUALPATH_FATAL("bad magic"), "FATAL .*bad magic");
}

TEST(CheckTest, PassingCheckDoesNothing) {
  int evaluated = 0;
  DUALPATH_CHECK(1 + 1 == 2, (++evaluated, "never"));
  EXPECT_EQ(evaluated, 0);
}

}  // namespace
}  // namespace dualpath
