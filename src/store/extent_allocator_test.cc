#include "store/extent_allocator.h"

#include <gtest/gtest.h>

namespace dualpath::store {
namespace {

TEST(ExtentAllocator, FirstFitAndCoalescing) {
  ExtentAllocator a(100);
  EXPECT_EQ(a.Allocate(10), 0u);
  EXPECT_EQ(a.Allocate(20), 10u);
  EXPECT_EQ(a.Allocate(30), 30u);
  EXPECT_EQ(a.used(), 60u);
  EXPECT_EQ(a.Allocate(41), std::nullopt);  // 40 left
  a.Free(10, 20);                           // hole [10, 30)
  EXPECT_EQ(a.free_extents(), 2u);
  EXPECT_EQ(a.Allocate(20), 10u);  // the hole is reused exactly (first fit)
  a.Free(0, 10);
  a.Free(10, 20);
  a.Free(30, 30);  // coalesces with both sides into one extent
  EXPECT_EQ(a.free_extents(), 1u);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.Allocate(100), 0u);
}

TEST(ExtentAllocator, AllocateAtClaimsOnlyFreeBytes) {
  ExtentAllocator a(100);
  EXPECT_TRUE(a.AllocateAt(40, 10));
  EXPECT_FALSE(a.AllocateAt(45, 10));  // overlaps [40, 50)
  EXPECT_FALSE(a.AllocateAt(35, 10));  // overlaps from below
  EXPECT_FALSE(a.AllocateAt(95, 10));  // past capacity
  EXPECT_FALSE(a.AllocateAt(0, 0));
  EXPECT_TRUE(a.AllocateAt(50, 50));  // the tail exactly
  EXPECT_TRUE(a.AllocateAt(0, 40));   // the head exactly
  EXPECT_EQ(a.used(), 100u);
  EXPECT_EQ(a.free_extents(), 0u);
  EXPECT_EQ(a.Allocate(1), std::nullopt);
}

TEST(ExtentAllocatorDeathTest, DoubleFreeAborts) {
  ExtentAllocator a(100);
  ASSERT_EQ(a.Allocate(10), 0u);
  a.Free(0, 10);
  EXPECT_DEATH(a.Free(0, 10), "Free");
}

}  // namespace
}  // namespace dualpath::store
