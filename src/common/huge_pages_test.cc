#include "dualpath/common/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <numeric>

namespace dualpath {
namespace {

bool KernelHasThp() { return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage"); }

TEST(HugePageAllocator, LargeBuffersAreHugePageAlignedAndAdvised) {
  if (!huge_pages::kEnabled) GTEST_SKIP() << "AddressSanitizer build: operator new only";
  HugePageVector<uint64_t> v(3 << 17);  // 3 MiB: two huge pages
  const auto addr = reinterpret_cast<uintptr_t>(v.data());
  EXPECT_EQ(addr % huge_pages::kHugePage, 0u);
  std::iota(v.begin(), v.end(), uint64_t{0});
  EXPECT_EQ(v.back(), v.size() - 1);
  if (KernelHasThp()) {
    EXPECT_TRUE(huge_pages::Advised(v.data()));
    EXPECT_TRUE(huge_pages::Advised(&v.back()));
  }
}

TEST(HugePageAllocator, SmallBuffersComeFromTheHeap) {
  HugePageVector<uint32_t> v(1000);
  EXPECT_FALSE(huge_pages::Advised(v.data()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % alignof(uint32_t), 0u);
}

TEST(HugePageAllocator, GrowingKeepsTheContentsAcrossBothKinds) {
  // From operator new through several huge-page mappings: every element survives each move.
  HugePageVector<uint32_t> v;
  for (uint32_t i = 0; i < (3u << 20); ++i) v.push_back(i * 2654435761u);
  for (uint32_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], i * 2654435761u) << i;
  v.clear();
  v.shrink_to_fit();
  EXPECT_EQ(v.capacity(), 0u);
}

TEST(HugePageAllocator, UnmapReturnsTheWholeMapping) {
  void* p = huge_pages::Map(huge_pages::kHugeMin + 1);
  ASSERT_NE(p, nullptr);
  static_cast<char*>(p)[huge_pages::kHugePage - 1] = 1;  // the whole rounded length is mapped
  if (KernelHasThp()) {
    EXPECT_TRUE(huge_pages::Advised(p));
  }
  huge_pages::Unmap(p, huge_pages::kHugeMin + 1);
  EXPECT_FALSE(huge_pages::Advised(p));  // no mapping there any more
}

TEST(HugePageAllocator, ImpossibleSizesThrow) {
  HugePageAllocator<uint64_t> a;
  EXPECT_THROW((void)a.allocate(SIZE_MAX / 4), std::bad_array_new_length);
  EXPECT_THROW((void)huge_pages::Map(SIZE_MAX - 1), std::bad_alloc);
}

}  // namespace
}  // namespace dualpath
