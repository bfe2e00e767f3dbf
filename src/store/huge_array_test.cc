#include "store/huge_array.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace dualpath::store {
namespace {

struct Slot {
  uint32_t tag = 7;
  uint32_t index = UINT32_MAX;
};

// The AnonHugePages (KiB) of the mapping that starts at `p` in /proc/self/smaps; -1 if none does.
long AnonHugeKiBAt(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      in = begin == reinterpret_cast<uintptr_t>(p);
      continue;
    }
    if (in && line.starts_with("AnonHugePages:")) return std::stol(line.substr(14));
  }
  return -1;
}

// Regression (issue 27, `exists` over gRPC): arrays of whole 2 MiB pages are mappings of their
// own at a 2 MiB-aligned address, so that all of them can be on huge pages. From operator new
// (before), a 10 MiB block started anywhere and only its aligned interior was advised.
TEST(HugeArray, WholeHugePagesAreAnAlignedMappingOfTheirOwn) {
  const size_t before = HugeArrayMappedBytes();
  constexpr size_t kN = 5 * kHugePageBytes / sizeof(Slot);  // 10 MiB
  {
    HugeArray<Slot> a = MakeHugeArray<Slot>(kN);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % kHugePageBytes, 0u);
    EXPECT_EQ(HugeArrayMappedBytes(), before + kN * sizeof(Slot));
    // Value-initialised, every element (the mapping's zero pages are not T{}).
    for (size_t i = 0; i < kN; i += 4099) {
      ASSERT_EQ(a[i].tag, 7u) << i;
      ASSERT_EQ(a[i].index, UINT32_MAX) << i;
    }
    EXPECT_EQ(a[kN - 1].tag, 7u);
    a[kN - 1].index = 1;  // the last byte is writable: the tail was not cut short
    // Huge pages are up to the kernel (THP mode, free 2 MiB blocks): a figure, not a promise.
    ::testing::Test::RecordProperty("anon_huge_kib", std::to_string(AnonHugeKiBAt(a.get())));
  }
  EXPECT_EQ(HugeArrayMappedBytes(), before);  // unmapped with the array
}

TEST(HugeArray, OtherSizesComeFromOperatorNew) {
  const size_t before = HugeArrayMappedBytes();
  // Below two huge pages, and above them but not a whole number of them.
  for (size_t n : {size_t{1}, size_t{1000}, (5 * kHugePageBytes + 4096) / sizeof(Slot)}) {
    HugeArray<Slot> a = MakeHugeArray<Slot>(n);
    EXPECT_EQ(HugeArrayMappedBytes(), before) << n;
    EXPECT_EQ(a[n - 1].tag, 7u);
    EXPECT_EQ(a[0].index, UINT32_MAX);
  }
}

}  // namespace
}  // namespace dualpath::store
