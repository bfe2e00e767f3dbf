#include "python/kv_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "dualpath/kv/block_file.h"
#include "dualpath/pool/pool.h"
#include "lib/random_bytes.h"

namespace dualpath::python {
namespace {

using dualpath::testlib::RandomBytes;

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
  std::unique_ptr<KvStore> Open(bool pool, bool store, unsigned copy_threads = 0) {
    KvStoreOptions o;
    o.copy_threads = copy_threads;
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

// Flips one byte of the first occurrence of `pattern` in the file at `path`.
void FlipByteOf(const std::string& path, std::span<const std::byte> pattern) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::vector<std::byte> all(std::filesystem::file_size(path));
  ASSERT_EQ(std::fread(all.data(), 1, all.size(), f), all.size());
  auto at = std::search(all.begin(), all.end(), pattern.begin(), pattern.end());
  ASSERT_NE(at, all.end());
  const long off = static_cast<long>(at - all.begin()) + 7;
  const auto flipped = static_cast<std::byte>(std::to_integer<unsigned>(all[off]) ^ 0x5Au);
  ASSERT_EQ(std::fseek(f, off, SEEK_SET), 0);
  ASSERT_EQ(std::fwrite(&flipped, 1, 1, f), 1u);
  std::fclose(f);
}

// A batch above kParallelCopyBytes is split over copy threads: every block still lands in its own
// buffer exactly, and a corrupt block is a miss for that block alone.
TEST_F(KvStoreTest, ParallelCopiesAreExactAndCorruptionStaysPerBlock) {
  constexpr size_t kBlocks = 24, kBytes = 512 << 10;  // 12 MiB: split over 4 threads
  static_assert(kBlocks * kBytes >= KvStore::kParallelCopyBytes);
  std::vector<std::vector<std::byte>> data;
  std::vector<kv::BlockHash> keys;
  std::vector<ConstBuf> in;
  for (size_t i = 0; i < kBlocks; ++i) {
    data.push_back(RandomBytes(kBytes, static_cast<uint32_t>(100 + i)));
    keys.push_back(Key(static_cast<uint8_t>(10 + i)));
    in.push_back({data.back().data(), kBytes});
  }
  auto s = Open(true, false, 4);
  for (const Status& st : s->PutBatch(keys, in)) {
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  FlipByteOf(pool_, std::span(data[13]).first(4096));
  std::vector<std::vector<std::byte>> out(kBlocks, std::vector<std::byte>(kBytes));
  std::vector<MutBuf> bufs;
  for (auto& o : out) {
    bufs.push_back({o.data(), kBytes});
  }
  auto r = s->GetBatch(keys, bufs);
  for (size_t i = 0; i < kBlocks; ++i) {
    if (i == 13) {
      EXPECT_EQ(r[i].status().code(), Code::kStorageMiss);
    } else {
      ASSERT_TRUE(r[i].ok()) << i << ": " << r[i].status().ToString();
      EXPECT_EQ(*r[i], kBytes);
      EXPECT_TRUE(out[i] == data[i]) << "block " << i;
    }
  }
  auto st = *s->Stats();
  EXPECT_EQ(st.pool_hits, kBlocks - 1);
  EXPECT_EQ(st.corrupt, 1u);
  EXPECT_EQ(st.misses, 1u);
}

// Issue 25 item 2, the pool's instance: the pool's index is shared memory every attached process
// may write. A peer that makes key B's entry hold key A's bytes with A's checksum tag (exactly
// what A's entry holds) does not get A's bytes served as B's: the tag is seeded with the key, so
// B's read fails the check and is a miss (counted as corrupt), and A still reads back.
TEST_F(KvStoreTest, APoolEntryHoldingAnotherKeysBlockAndTagIsAMiss) {
  const auto a = RandomBytes(128 << 10, 7);
  auto s = Open(true, false);
  const kv::BlockHash put_keys[] = {Key(1)};
  const ConstBuf put_bufs[] = {{a.data(), a.size()}};
  ASSERT_TRUE(s->PutBatch(put_keys, put_bufs)[0].ok());
  {
    auto peer = pool::Pool::Open(pool_);
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    auto pin = (*peer)->Pin(Key(1));
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    const std::vector<std::byte> copy(pin->data, pin->data + pin->size);
    const uint64_t tag = pin->user_tag;
    ASSERT_TRUE((*peer)->Unpin(*pin).ok());
    ASSERT_TRUE((*peer)->Put(Key(2), copy, tag).ok());
  }
  std::vector<std::byte> out(a.size());
  const kv::BlockHash keys[] = {Key(2), Key(1)};
  std::vector<std::byte> out_a(a.size());
  const MutBuf bufs[] = {{out.data(), out.size()}, {out_a.data(), out_a.size()}};
  auto r = s->GetBatch(keys, bufs);
  EXPECT_EQ(r[0].status().code(), Code::kStorageMiss) << "key 2 was served key 1's bytes";
  ASSERT_TRUE(r[1].ok()) << r[1].status().ToString();
  EXPECT_TRUE(out_a == a);
  auto st = *s->Stats();
  EXPECT_EQ(st.corrupt, 1u);
  EXPECT_EQ(st.pool_hits, 1u);
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

TEST(KvStoreOptionsTest, CopyThreadsAreBounded) {
  auto s = KvStore::Open({.pool_path = "/dev/shm/unused", .copy_threads = 257});
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("copy_threads = 257"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::python
