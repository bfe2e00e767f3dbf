// RackLink (engine/rack_link.h): rack pool objects as the PE<->DE KV substrate, in both memory
// models. Two RackLinks on one region stand for the two engines (nodes 0 and 1).
#include "engine/rack_link.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "dualpath/pool/pool.h"
#include "engine/rack_test_util.h"

namespace dualpath::engine {
namespace {

class RackLinkTest : public ::testing::TestWithParam<pool::MemoryModel> {
 protected:
  void SetUp() override {
    Status s = CreateTestRackPool("rkp-rack-link-test", GetParam(), 256, 4, &path_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override { EXPECT_TRUE(pool::Pool::Destroy(path_).ok()); }

  std::unique_ptr<RackLink> Link(uint32_t node) {
    auto l = RackLink::Open(path_, node);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) return nullptr;
    return std::move(l).value();
  }

  static std::vector<std::byte> Bytes(size_t n, uint8_t seed) {
    std::vector<std::byte> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xFF);
    return v;
  }

  std::string path_;
};

RackObjectId Id(uint32_t layer) {
  return RackObjectId{RackDirection::kToDecode, 77, 1, 5, 9, layer};
}

TEST_P(RackLinkTest, ObjectRoundTripsBetweenEnginesAndIsDeletedOnRelease) {
  auto pe = Link(0);
  auto de = Link(1);
  ASSERT_TRUE(pe && de);
  // The PE's ranges (two pieces of its area) arrive in the DE's two ranges, in order.
  std::vector<std::byte> a = Bytes(5000, 1), b = Bytes(12288, 2);
  const RackRange src[] = {{a.data(), a.size()}, {b.data(), b.size()}};
  ASSERT_TRUE(pe->Write(Id(3), src).ok());
  std::vector<std::byte> out(a.size() + b.size() + 100, std::byte{0xEE});
  const RackRange dst[] = {{out.data(), a.size()}, {out.data() + a.size() + 100, b.size()}};
  Status r = de->Read(Id(3), dst);
  ASSERT_TRUE(r.ok()) << r.ToString();
  EXPECT_EQ(std::memcmp(out.data(), a.data(), a.size()), 0);
  EXPECT_EQ(out[a.size()], std::byte{0xEE});  // the gap between the ranges is untouched
  EXPECT_EQ(std::memcmp(out.data() + a.size() + 100, b.data(), b.size()), 0);
  EXPECT_EQ(pe->Stats().written_bytes, a.size() + b.size());
  EXPECT_EQ(de->Stats().read_bytes, a.size() + b.size());
  // Another layer is another object.
  EXPECT_EQ(de->Read(Id(4), dst).code(), Code::kNotFound);
  pe->Release(Id(3));
  EXPECT_EQ(de->Read(Id(3), dst).code(), Code::kNotFound);
}

TEST_P(RackLinkTest, CorruptOrMisSizedObjectIsAnErrorNeverWrongBytes) {
  auto pe = Link(0);
  auto de = Link(1);
  ASSERT_TRUE(pe && de);
  std::vector<std::byte> a = Bytes(8192, 3);
  const RackRange src[] = {{a.data(), a.size()}};
  ASSERT_TRUE(pe->Write(Id(0), src).ok());
  std::vector<std::byte> out(a.size());
  // A reader expecting another size (a protocol mismatch) refuses the object.
  const RackRange shorter[] = {{out.data(), a.size() - 64}};
  Status s = de->Read(Id(0), shorter);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("8192 bytes, expected 8128"), std::string::npos) << s.ToString();
  // One byte flipped in the region (a stray write, a bad DIMM): the checksum catches it.
  {
    pool::OpenOptions o;
    o.node = 2;
    o.background_thread = false;
    auto p = pool::Pool::Open(path_, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto pin = (*p)->Pin(Id(0).Key());
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    auto* byte = const_cast<std::byte*>(pin->data + 1000);
    *byte ^= std::byte{0x01};
    if (GetParam() == pool::MemoryModel::kNonCoherent) {
      // Write the line back, as a writer on that memory model must.
      __builtin_ia32_clflush(byte);
    }
    ASSERT_TRUE((*p)->Unpin(*pin).ok());
  }
  const RackRange dst[] = {{out.data(), out.size()}};
  s = de->Read(Id(0), dst);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.ToString();
  EXPECT_EQ(de->Stats().errors, 2u);
  EXPECT_EQ(de->Stats().read_bytes, 0u);
  pe->Release(Id(0));
}

TEST_P(RackLinkTest, StaleObjectOfADeadAttemptIsReplaced) {
  std::vector<std::byte> old_bytes = Bytes(4096, 4), new_bytes = Bytes(4096, 5);
  {
    // A producer that went away without releasing: its pin goes with it, the object stays.
    auto gone = Link(0);
    ASSERT_TRUE(gone);
    const RackRange src[] = {{old_bytes.data(), old_bytes.size()}};
    ASSERT_TRUE(gone->Write(Id(1), src).ok());
  }
  auto pe = Link(0);
  auto de = Link(1);
  ASSERT_TRUE(pe && de);
  const RackRange src[] = {{new_bytes.data(), new_bytes.size()}};
  Status w = pe->Write(Id(1), src);
  ASSERT_TRUE(w.ok()) << w.ToString();
  std::vector<std::byte> out(4096);
  const RackRange dst[] = {{out.data(), out.size()}};
  ASSERT_TRUE(de->Read(Id(1), dst).ok());
  EXPECT_EQ(out, new_bytes);
  pe->Release(Id(1));
}

TEST(RackObjectIdTest, EveryFieldNamesAnotherObject) {
  const RackObjectId base{RackDirection::kToDecode, 1, 0, 2, 3, 4};
  std::vector<RackObjectId> others(6, base);
  others[0].direction = RackDirection::kToPrefill;
  others[1].request_id = 2;
  others[2].attempt = 1;
  others[3].pe_xfer_id = 3;
  others[4].de_xfer_id = 4;
  others[5].layer = 5;
  for (const RackObjectId& o : others) EXPECT_NE(o.Key(), base.Key());
  EXPECT_EQ(base.Key(), base.Key());
}

INSTANTIATE_TEST_SUITE_P(Models, RackLinkTest,
                         ::testing::Values(pool::MemoryModel::kCoherent,
                                           pool::MemoryModel::kNonCoherent),
                         [](const auto& info) {
                           return info.param == pool::MemoryModel::kCoherent ? "Coherent"
                                                                             : "NonCoherent";
                         });

}  // namespace
}  // namespace dualpath::engine
