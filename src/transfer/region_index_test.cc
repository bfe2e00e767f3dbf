#include "dualpath/transfer/region_index.h"

#include <gtest/gtest.h>

namespace dualpath::transfer {
namespace {

RegionIndex Index(std::initializer_list<RegionRange> rs) {
  RegionIndex idx;
  for (const RegionRange& r : rs) {
    EXPECT_TRUE(idx.Insert(r).ok());
  }
  return idx;
}

TEST(RegionIndexTest, FindsContainingRegionOnly) {
  RegionIndex idx = Index({{RegionId(1), 0x1000, 0x1000}, {RegionId(2), 0x4000, 0x100}});
  ASSERT_NE(idx.Find(0x1000, 0x1000), nullptr);
  EXPECT_EQ(idx.Find(0x1800, 0x800)->id, RegionId(1));
  EXPECT_EQ(idx.Find(0x1800, 0x801), nullptr);  // runs past the end
  EXPECT_EQ(idx.Find(0x0fff, 2), nullptr);      // starts before
  EXPECT_EQ(idx.Find(0x2000, 1), nullptr);      // gap
  EXPECT_EQ(idx.Find(0x40ff, 1)->id, RegionId(2));
  EXPECT_EQ(idx.Find(0x1000, 0), nullptr);                // empty ranges are never contained
  EXPECT_EQ(idx.Find(0x1800, UINT64_MAX - 10), nullptr);  // wraps
}

TEST(RegionIndexTest, RejectsOverlapsDuplicatesAndEmptyRanges) {
  RegionIndex idx = Index({{RegionId(1), 0x1000, 0x1000}});
  EXPECT_EQ(idx.Insert({RegionId(2), 0x1fff, 2}).code(), Code::kAlreadyExists);
  EXPECT_EQ(idx.Insert({RegionId(2), 0x0800, 0x900}).code(), Code::kAlreadyExists);
  EXPECT_EQ(idx.Insert({RegionId(1), 0x9000, 1}).code(), Code::kAlreadyExists);
  EXPECT_EQ(idx.Insert({RegionId(3), 0x9000, 0}).code(), Code::kInvalidArgument);
  EXPECT_EQ(idx.Insert({RegionId(3), UINT64_MAX - 1, 4}).code(), Code::kInvalidArgument);
  EXPECT_TRUE(idx.Insert({RegionId(2), 0x2000, 1}).ok());  // adjacent is fine
  EXPECT_TRUE(idx.Erase(RegionId(1)));
  EXPECT_FALSE(idx.Erase(RegionId(1)));
  EXPECT_EQ(idx.Find(0x1000, 1), nullptr);
}

TEST(ValidateBatchTest, AcceptsInRangeDescriptorsAndReportsRegions) {
  RegionIndex local = Index({{RegionId(1), 0x10000, 0x10000}});
  RegionIndex remote = Index({{RegionId(7), 0x900000, 0x1000}, {RegionId(8), 0xa00000, 0x1000}});
  std::vector<Descriptor> d = {{0x10000, 0x900000, 0x1000}, {0x11000, 0xa00800, 0x800}};
  std::vector<DescriptorRegions> out;
  ASSERT_TRUE(ValidateBatch(d, local, remote, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].remote, RegionId(7));
  EXPECT_EQ(out[1].remote, RegionId(8));
  EXPECT_EQ(out[1].local, RegionId(1));
}

TEST(ValidateBatchTest, RejectsNamingTheBadDescriptor) {
  RegionIndex local = Index({{RegionId(1), 0x10000, 0x10000}});
  RegionIndex remote = Index({{RegionId(7), 0x900000, 0x1000}});
  std::vector<DescriptorRegions> out;
  std::vector<Descriptor> d = {{0x10000, 0x900000, 0x100}, {0x10000, 0x900f00, 0x101}};
  Status s = ValidateBatch(d, local, remote, &out);
  EXPECT_EQ(s.code(), Code::kTransferBadDescriptor);
  EXPECT_NE(s.message().find("descriptor 1: remote"), std::string::npos) << s.ToString();

  d = {{0x1f000, 0x900000, 0x1001}};
  s = ValidateBatch(d, local, remote, &out);
  EXPECT_EQ(s.code(), Code::kTransferBadDescriptor);
  EXPECT_NE(s.message().find("descriptor 0: local"), std::string::npos) << s.ToString();

  d = {{0x10000, 0x900000, 0}};
  EXPECT_EQ(ValidateBatch(d, local, remote, &out).code(), Code::kTransferBadDescriptor);
  EXPECT_EQ(ValidateBatch({}, local, remote, &out).code(), Code::kInvalidArgument);
  // A remote address that would be valid locally is still rejected: ranges are per side.
  d = {{0x10000, 0x10000, 0x10}};
  EXPECT_EQ(ValidateBatch(d, local, remote, &out).code(), Code::kTransferBadDescriptor);
}

}  // namespace
}  // namespace dualpath::transfer
