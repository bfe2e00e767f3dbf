#include "python/kv_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "dualpath/kv/block_file.h"
#include "python/copy_verify.h"

namespace dualpath::python {
namespace {

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) {
    b = static_cast<std::byte>(rng());
  }
  return v;
}

// The streaming AVX2 path and the plain path must both copy exactly and return kv::BlockChecksum,
// for every size class and every destination misalignment.
TEST(CopyAndChecksumTest, CopiesExactlyAndMatchesBlockChecksum) {
  const std::vector<size_t> sizes = {0, 1, 63, 64 << 10, (64 << 10) + 1, (256 << 10) + 77, 1 << 20};
  for (size_t n : sizes) {
    const auto src = RandomBytes(n + 64, static_cast<uint32_t>(n));
    for (size_t shift : {0, 1, 16, 31, 33}) {
      std::vector<std::byte> dst(n + 64, std::byte{0});
      const uint64_t sum = CopyAndChecksum(src.data() + 3, dst.data() + shift, n);
      EXPECT_EQ(sum, kv::BlockChecksum(std::span(src.data() + 3, n))) << n << " " << shift;
      EXPECT_EQ(std::memcmp(dst.data() + shift, src.data() + 3, n), 0) << n << " " << shift;
      EXPECT_EQ(dst[n + shift], std::byte{0}) << "wrote past the end";
    }
  }
}

class KvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = "/dev/shm/dualpath-kvstore-test-" + std::to_string(getpid());
    dir_ = std::filesystem::temp_directory_path() /
           ("dualpath-kvstore-test-" + std::to_string(getpid()));
    std::filesystem::remove(pool_);
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    std::filesystem::remove(pool_);
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<KvStore> Open(bool pool, bool store) {
    KvStoreOptions o;
    o.pool_path = pool ? pool_ : "";
    o.store_path = store ? dir_.string() : "";
    o.pool_bytes = 64 << 20;
    o.sync = storage::SyncMode::kNone;
    auto s = KvStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(*s);
  }
  static kv::BlockHash Key(uint8_t i) {
    kv::BlockHash h;
    h.bytes.fill(i);
    return h;
  }
  std::string pool_;
  std::filesystem::path dir_;
};

TEST_F(KvStoreTest, RoundTripThroughBothTiersAndLeadingHits) {
  const auto a = RandomBytes(300 << 10, 1);
  const auto b = RandomBytes(4096, 2);
  {
    auto s = Open(true, true);
    const kv::BlockHash keys[] = {Key(1), Key(2)};
    const ConstBuf bufs[] = {{a.data(), a.size()}, {b.data(), b.size()}};
    for (const Status& st : s->PutBatch(keys, bufs)) {
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    const kv::BlockHash probe[] = {Key(1), Key(2), Key(3), Key(1)};
    EXPECT_EQ(*s->LeadingHits(probe), 2u);
  }
  std::filesystem::remove(pool_);  // only the persistent tier is left
  auto s = Open(true, true);
  std::vector<std::byte> out_a(a.size()), out_b(b.size()), small(10);
  const kv::BlockHash keys[] = {Key(1), Key(2), Key(3), Key(1)};
  const MutBuf bufs[] = {{out_a.data(), out_a.size()},
                         {out_b.data(), out_b.size()},
                         {out_b.data(), out_b.size()},
                         {small.data(), small.size()}};
  auto r = s->GetBatch(keys, bufs);
  ASSERT_TRUE(r[0].ok()) << r[0].status().ToString();
  EXPECT_EQ(*r[0], a.size());
  EXPECT_EQ(out_a, a);
  ASSERT_TRUE(r[1].ok());
  EXPECT_EQ(out_b, b);
  EXPECT_EQ(r[2].status().code(), Code::kStorageMiss);
  EXPECT_EQ(r[3].status().code(), Code::kOutOfRange);  // the buffer is smaller than the block
  auto st = *s->Stats();
  EXPECT_EQ(st.store_hits, 2u);
  EXPECT_EQ(st.pool.ready_entries, 2u);  // promoted
}

TEST_F(KvStoreTest, RegistrationBoundsRawRanges) {
  auto s = Open(true, false);
  EXPECT_TRUE(s->RegisterBuffer(0x10000, 0x1000).ok());
  EXPECT_FALSE(s->RegisterBuffer(0x10800, 0x1000).ok());  // overlaps
  EXPECT_TRUE(s->CheckRegistered(0x10000, 0x1000).ok());
  EXPECT_TRUE(s->CheckRegistered(0x10ff0, 0x10).ok());
  EXPECT_FALSE(s->CheckRegistered(0x10ff0, 0x11).ok());
  EXPECT_FALSE(s->CheckRegistered(0xffff, 2).ok());
  EXPECT_TRUE(s->UnregisterBuffer(0x10000).ok());
  EXPECT_EQ(s->UnregisterBuffer(0x10000).code(), Code::kNotFound);
  EXPECT_FALSE(s->CheckRegistered(0x10000, 1).ok());
}

TEST_F(KvStoreTest, ClosedStoreRefusesEverything) {
  auto s = Open(true, false);
  s->Close();
  const kv::BlockHash keys[] = {Key(1)};
  EXPECT_EQ(s->LeadingHits(keys).status().code(), Code::kStorageClosed);
  EXPECT_EQ(s->Remove(Key(1)).code(), Code::kStorageClosed);
  std::byte x[1];
  const ConstBuf bufs[] = {{x, 1}};
  EXPECT_EQ(s->PutBatch(keys, bufs)[0].code(), Code::kStorageClosed);
}

TEST(KvStoreOptionsTest, NeedsATier) {
  EXPECT_EQ(KvStore::Open({.pool_path = "", .store_path = ""}).status().code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::python
