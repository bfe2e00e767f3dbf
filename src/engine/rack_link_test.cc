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

// The rack prefix cache's side of RackLink: blocks under their content hash. A block published
// twice is one entry; a read hands over the published bytes while pinned; a block that fails the
// reader's verification is counted corrupt and dropped (so a good copy can take its place); when
// the region is full the LRU evicts unpinned blocks (a later read is a miss), never the one being
// read.
TEST_P(RackLinkTest, PrefixBlocksArePublishedReadPinnedAndEvictedLeastRecentlyUsedFirst) {
  auto de = Link(1);
  auto pe = Link(0);
  ASSERT_TRUE(pe && de);
  auto hash = [](uint32_t i) {
    kv::BlockHash h;
    std::memcpy(h.bytes.data(), &i, sizeof(i));
    h.bytes[31] = 0xB1;
    return h;
  };
  constexpr size_t kBlock = 1 << 20;  // the region holds 16 MiB of data
  auto equals = [](const std::vector<std::byte>& want) {
    return [&want](std::span<const std::byte> got) {
      return got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size()) == 0
                 ? Status::Ok()
                 : Status(Code::kCorruption, "bytes differ");
    };
  };
  const std::vector<std::byte> b0 = Bytes(kBlock, 0), b1 = Bytes(kBlock, 1);
  ASSERT_TRUE(de->PublishBlock(hash(0), b0).ok());
  ASSERT_TRUE(pe->PublishBlock(hash(0), b0).ok());  // already there: the same key, the same bytes
  ASSERT_TRUE(de->PublishBlock(hash(1), b1).ok());
  EXPECT_EQ(de->Stats().prefix_published + pe->Stats().prefix_published, 2u);
  ASSERT_TRUE(pe->ReadBlock(hash(0), equals(b0)).ok());
  EXPECT_EQ(pe->ReadBlock(hash(99), equals(b0)).code(), Code::kNotFound);
  // A reader that rejects the bytes: counted corrupt, and the block is gone from the rack.
  EXPECT_FALSE(pe->ReadBlock(hash(1), equals(b0)).ok());
  EXPECT_EQ(pe->ReadBlock(hash(1), equals(b1)).code(), Code::kNotFound);
  RackLinkStats st = pe->Stats();
  EXPECT_EQ(st.prefix_hits, 1u);
  EXPECT_EQ(st.prefix_bytes, kBlock);
  EXPECT_EQ(st.prefix_misses, 2u);
  EXPECT_EQ(st.prefix_corrupt, 1u);

  // Pinned while read: publishing a region's worth of other blocks meanwhile evicts everything
  // else, never block 0, whose bytes stay intact until the reader is done.
  Status read = pe->ReadBlock(hash(0), [&](std::span<const std::byte> got) {
    for (uint32_t i = 100; i < 120; ++i) {
      Status s = de->PublishBlock(hash(i), Bytes(kBlock, static_cast<uint8_t>(i)));
      if (!s.ok() && s.code() != Code::kPoolFull) return s;
    }
    return equals(b0)(got);
  });
  ASSERT_TRUE(read.ok()) << read.ToString();
  // The oldest of those were evicted for the newest (LRU), so the first is a miss, the last a hit.
  EXPECT_EQ(pe->ReadBlock(hash(100), equals(b0)).code(), Code::kNotFound);
  const std::vector<std::byte> last = Bytes(kBlock, 119);
  EXPECT_TRUE(pe->ReadBlock(hash(119), equals(last)).ok());
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
