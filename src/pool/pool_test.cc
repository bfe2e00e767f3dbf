// Single-process behaviour of the pool, in both memory models.
#include "dualpath/pool/pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "pool/layout.h"
#include "pool/test_util.h"

namespace dualpath::pool {
namespace {

using testing::Checksum;
using testing::FillPayload;
using testing::MakeHash;
using testing::TempDir;

class PoolTest : public ::testing::TestWithParam<MemoryModel> {
 protected:
  // 8 chunks of 64 KiB; 1 KiB minimum slot.
  Geometry SmallGeometry(uint64_t chunks = 8) {
    Geometry g;
    g.chunk_bytes = 64 << 10;
    g.index_capacity = 1024;
    g.max_procs = 8;
    g.pin_records = 64;
    g.num_nodes = 2;
    g.model = GetParam();
    // Exactly `chunks` chunks of data.
    g.region_bytes =
        internal::LayoutFor(g, chunks, g.index_capacity).data_off + chunks * g.chunk_bytes;
    return g;
  }
  OpenOptions Options() {
    OpenOptions o;
    o.background_thread = false;
    o.local_dir = dir_.path();
    o.clock = &clock_;
    return o;
  }
  std::unique_ptr<Pool> CreateAndOpen(const Geometry& g) {
    path_ = dir_.File("region");
    EXPECT_TRUE(Pool::Create(path_, g).ok());
    Result<std::unique_ptr<Pool>> p = Pool::Open(path_, Options());
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return std::move(p).value();
  }
  std::vector<std::byte> Payload(uint64_t key, size_t size) {
    std::vector<std::byte> v(size);
    FillPayload(key, v);
    return v;
  }

  TempDir dir_;
  ManualClock clock_{1'000'000};
  std::string path_;
};

// Bytes of a file actually backed by the file system.
uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// Issue 19: a sparse region on a full tmpfs was SIGBUS at the first store into an unbacked page.
// Create reserves every byte; Open reserves a region that is (still) sparse.
TEST_P(PoolTest, RegionIsReservedAtCreateAndAtOpenIfSparse) {
  const Geometry g = SmallGeometry(64);
  path_ = dir_.File("region");
  ASSERT_TRUE(Pool::Create(path_, g).ok());
  EXPECT_GE(AllocatedBytes(path_), g.region_bytes) << "Create left the region sparse";
  // Punch a hole in the data area, as a region made before reservation (ftruncate) would have.
  {
    const int fd = open(path_.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const auto quarter = static_cast<off_t>(g.region_bytes / 4);  // inside the data area
    ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * quarter, quarter), 0)
        << std::strerror(errno);
    close(fd);
  }
  ASSERT_LT(AllocatedBytes(path_), g.region_bytes);
  {
    Result<std::unique_ptr<Pool>> p = Pool::Open(path_, Options());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_GE(AllocatedBytes(path_), g.region_bytes) << "Open left a sparse region sparse";
    EXPECT_TRUE((*p)->Put(MakeHash(1), Payload(1, 4096)).ok());
  }
  if (GetParam() == MemoryModel::kNonCoherent) {
    // The node-local lock file is mapped too: reserved as well.
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      if (e.path().extension() == ".lock") {
        EXPECT_GE(AllocatedBytes(e.path().string()), e.file_size()) << e.path();
      }
    }
  }
}

// A region the file system cannot hold is a clear kStorageNoSpace at Create, with nothing left at
// the path, never SIGBUS later. Needs root to mount a small tmpfs; skips otherwise.
TEST_P(PoolTest, RegionLargerThanTheFileSystemIsNoSpaceAtCreate) {
  const std::string mnt = dir_.File("small");
  ASSERT_TRUE(std::filesystem::create_directory(mnt));
  if (mount("dp_pool_nospace", mnt.c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount tmpfs (" << std::strerror(errno) << "); needs root";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  for (uint64_t mib : {64ull, 16ull << 10}) {  // 8x the file system, and 16 GiB
    Geometry g = SmallGeometry();
    g.region_bytes = mib << 20;
    g.index_capacity = 0;
    Status s = Pool::Create(mnt + "/region", g);
    EXPECT_EQ(s.code(), Code::kStorageNoSpace) << mib << " MiB: " << s.ToString();
    EXPECT_NE(s.message().find("reserve"), std::string::npos) << s.message();
    EXPECT_FALSE(std::filesystem::exists(mnt + "/region")) << "a failed create left a file";
  }
  // What fits is created, and every byte of it can be written.
  Geometry g = SmallGeometry(32);  // 2 MiB of data
  ASSERT_TRUE(Pool::Create(mnt + "/region", g).ok());
  Result<std::unique_ptr<Pool>> p = Pool::Open(mnt + "/region", Options());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_TRUE((*p)->Put(MakeHash(i), Payload(i, 60 << 10)).ok()) << i;
  }
}

TEST_P(PoolTest, PutGetPinUnpinDelete) {
  auto pool = CreateAndOpen(SmallGeometry());
  auto data = Payload(1, 5000);
  ASSERT_TRUE(pool->Put(MakeHash(1), data, Checksum(data)).ok());
  EXPECT_TRUE(pool->Contains(MakeHash(1)));
  EXPECT_FALSE(pool->Contains(MakeHash(2)));
  EXPECT_EQ(pool->Put(MakeHash(1), data).code(), Code::kAlreadyExists);

  std::vector<std::byte> out(8000);
  uint64_t tag = 0;
  Result<uint64_t> n = pool->Get(MakeHash(1), out, &tag);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 5000u);
  EXPECT_EQ(tag, Checksum(data));
  EXPECT_EQ(std::memcmp(out.data(), data.data(), data.size()), 0);

  std::vector<std::byte> small(100);
  EXPECT_EQ(pool->Get(MakeHash(1), small).status().code(), Code::kOutOfRange);

  Result<PinnedBlock> pin = pool->Pin(MakeHash(1));
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->size, 5000u);
  EXPECT_EQ(Checksum({pin->data, pin->size}), Checksum(data));
  EXPECT_EQ(pool->Stats().total_pins, 1u);
  EXPECT_EQ(pool->Delete(MakeHash(1)).code(), Code::kPoolPinned);
  ASSERT_TRUE(pool->Unpin(*pin).ok());
  EXPECT_EQ(pool->Unpin(*pin).code(), Code::kFailedPrecondition);
  ASSERT_TRUE(pool->Delete(MakeHash(1)).ok());
  EXPECT_FALSE(pool->Contains(MakeHash(1)));
  EXPECT_EQ(pool->Delete(MakeHash(1)).code(), Code::kNotFound);
  EXPECT_EQ(pool->Pin(MakeHash(1)).status().code(), Code::kNotFound);
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.ready_entries, 0u);
  EXPECT_EQ(s.free_chunks, s.num_chunks);
}

TEST_P(PoolTest, ReserveIsInvisibleUntilPublish) {
  auto pool = CreateAndOpen(SmallGeometry());
  Result<WriteHandle> w = pool->Reserve(MakeHash(7), 3000, 42);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(pool->Contains(MakeHash(7)));
  EXPECT_EQ(pool->Pin(MakeHash(7)).status().code(), Code::kNotFound);
  EXPECT_EQ(pool->Reserve(MakeHash(7), 3000).status().code(), Code::kAlreadyExists);
  auto data = Payload(7, 3000);
  std::memcpy(w->data, data.data(), data.size());
  ASSERT_TRUE(pool->Publish(*w).ok());
  EXPECT_TRUE(pool->Contains(MakeHash(7)));
  EXPECT_EQ(pool->Publish(*w).code(), Code::kFailedPrecondition);  // handle consumed

  Result<WriteHandle> w2 = pool->Reserve(MakeHash(8), 3000);
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE(pool->Abort(*w2).ok());
  EXPECT_FALSE(pool->Contains(MakeHash(8)));
  EXPECT_EQ(pool->Stats().writing_entries, 0u);
}

TEST_P(PoolTest, LongestPrefix) {
  auto pool = CreateAndOpen(SmallGeometry());
  std::vector<BlockHash> chain;
  for (uint64_t i = 0; i < 10; ++i) chain.push_back(MakeHash(100 + i));
  for (uint64_t i = 0; i < 6; ++i) {
    auto d = Payload(100 + i, 1024);
    ASSERT_TRUE(pool->Put(chain[i], d).ok());
  }
  auto d = Payload(108, 1024);
  ASSERT_TRUE(pool->Put(chain[8], d).ok());  // present, but after a gap
  EXPECT_EQ(pool->LongestPrefix(chain), 6u);
  EXPECT_EQ(pool->LongestPrefix(std::span(chain).subspan(7)), 0u);
  EXPECT_EQ(pool->LongestPrefix({}), 0u);
}

TEST_P(PoolTest, LruEvictsLeastRecentlyUsedUnpinned) {
  // 2 chunks x 64 KiB, blocks of 16 KiB: 8 blocks fit.
  auto pool = CreateAndOpen(SmallGeometry(2));
  const uint64_t kBlock = 16 << 10;
  ASSERT_EQ(pool->Stats().num_chunks, 2u);
  for (uint64_t i = 0; i < 8; ++i) {
    auto d = Payload(i, kBlock);
    ASSERT_TRUE(pool->Put(MakeHash(i), d).ok()) << i;
  }
  // Touch 0 (most recent now), pin 1 (not evictable).
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(pool->Get(MakeHash(0), out).ok());
  Result<PinnedBlock> pin = pool->Pin(MakeHash(1));
  ASSERT_TRUE(pin.ok());
  // Two more blocks evict the two least recently used unpinned: 2 and 3.
  for (uint64_t i = 8; i < 10; ++i) {
    auto d = Payload(i, kBlock);
    ASSERT_TRUE(pool->Put(MakeHash(i), d).ok()) << i;
  }
  EXPECT_TRUE(pool->Contains(MakeHash(0)));
  EXPECT_TRUE(pool->Contains(MakeHash(1)));
  EXPECT_FALSE(pool->Contains(MakeHash(2)));
  EXPECT_FALSE(pool->Contains(MakeHash(3)));
  for (uint64_t i = 4; i < 10; ++i) EXPECT_TRUE(pool->Contains(MakeHash(i))) << i;
  EXPECT_EQ(pool->Stats().evictions, 2u);
  // The pinned block is intact.
  EXPECT_EQ(Checksum({pin->data, pin->size}), Checksum(Payload(1, kBlock)));
  ASSERT_TRUE(pool->Unpin(*pin).ok());
  // Explicit eviction.
  Result<size_t> ev = pool->Evict(3);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(*ev, 3u);
  EXPECT_EQ(pool->Stats().ready_entries, 5u);
}

TEST_P(PoolTest, FullOfPinnedBlocksIsPoolFull) {
  auto pool = CreateAndOpen(SmallGeometry(1));
  const uint64_t kBlock = 32 << 10;
  std::vector<PinnedBlock> pins;
  for (uint64_t i = 0; i < 2; ++i) {
    auto d = Payload(i, kBlock);
    ASSERT_TRUE(pool->Put(MakeHash(i), d).ok());
    pins.push_back(*pool->Pin(MakeHash(i)));
  }
  auto d = Payload(9, kBlock);
  EXPECT_EQ(pool->Put(MakeHash(9), d).code(), Code::kPoolFull);
  for (auto& p : pins) ASSERT_TRUE(pool->Unpin(p).ok());
  EXPECT_TRUE(pool->Put(MakeHash(9), d).ok());
}

TEST_P(PoolTest, LargeBlocksSpanChunkRuns) {
  auto pool = CreateAndOpen(SmallGeometry(8));
  auto big = Payload(5, (64 << 10) * 3 + 17);  // 4 chunks
  ASSERT_TRUE(pool->Put(MakeHash(5), big, Checksum(big)).ok());
  EXPECT_EQ(pool->Stats().free_chunks, 4u);
  std::vector<std::byte> out(big.size());
  ASSERT_TRUE(pool->Get(MakeHash(5), out).ok());
  EXPECT_EQ(out, big);
  ASSERT_TRUE(pool->Delete(MakeHash(5)).ok());
  EXPECT_EQ(pool->Stats().free_chunks, 8u);
  // Larger than the whole data area: a clear error, nothing allocated.
  Result<WriteHandle> w = pool->Reserve(MakeHash(6), 9 * (64 << 10));
  EXPECT_EQ(w.status().code(), Code::kInvalidArgument);
  EXPECT_NE(w.status().message().find("larger than the region"), std::string::npos);
  EXPECT_EQ(pool->Reserve(MakeHash(6), 0).status().code(), Code::kInvalidArgument);
}

TEST_P(PoolTest, RootsSurviveReopen) {
  auto pool = CreateAndOpen(SmallGeometry());
  Result<std::span<std::byte>> r = pool->CreateRoot("prefix-index", 1000);
  ASSERT_TRUE(r.ok());
  std::memset(r->data(), 0x5a, 1000);
  const uint64_t off = pool->OffsetOf(r->data());
  EXPECT_EQ(pool->PointerAt(off), r->data());
  EXPECT_EQ(pool->CreateRoot("prefix-index", 10).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(pool->CreateRoot("", 10).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(pool->CreateRoot(std::string(80, 'x'), 10).status().code(), Code::kInvalidArgument);
  pool.reset();
  auto again = Pool::Open(path_, Options());
  ASSERT_TRUE(again.ok());
  Result<std::span<std::byte>> g = (*again)->GetRoot("prefix-index");
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->size(), 1000u);
  EXPECT_EQ(static_cast<uint8_t>((*g)[999]), 0x5a);
  EXPECT_EQ((*again)->Stats().roots, 1u);
  ASSERT_TRUE((*again)->Recover().ok());  // the sweep keeps roots
  EXPECT_TRUE((*again)->GetRoot("prefix-index").ok());
  ASSERT_TRUE((*again)->DestroyRoot("prefix-index").ok());
  EXPECT_EQ((*again)->GetRoot("prefix-index").status().code(), Code::kNotFound);
  EXPECT_EQ((*again)->DestroyRoot("prefix-index").code(), Code::kNotFound);
  EXPECT_EQ((*again)->Stats().free_chunks, (*again)->Stats().num_chunks);
}

TEST_P(PoolTest, SweepKeepsLiveStateAndSecondProcessSlot) {
  auto pool = CreateAndOpen(SmallGeometry());
  auto other = Pool::Open(path_, Options());
  ASSERT_TRUE(other.ok());
  auto d = Payload(1, 2048);
  ASSERT_TRUE(pool->Put(MakeHash(1), d).ok());
  Result<PinnedBlock> pin = (*other)->Pin(MakeHash(1));
  ASSERT_TRUE(pin.ok());
  Result<WriteHandle> w = (*other)->Reserve(MakeHash(2), 2048);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(pool->Recover().ok());
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.live_procs, 2u);
  EXPECT_EQ(s.total_pins, 1u);
  EXPECT_EQ(s.writing_entries, 1u);
  ASSERT_TRUE((*other)->Publish(*w).ok());
  ASSERT_TRUE((*other)->Unpin(*pin).ok());
  other->reset();
  s = pool->Stats();
  EXPECT_EQ(s.live_procs, 1u);
  EXPECT_EQ(s.ready_entries, 2u);
}

TEST_P(PoolTest, ExpiredLeaseOfRemoteHostIsReclaimed) {
  auto pool = CreateAndOpen(SmallGeometry());
  // A process "on another host": its liveness is only its lease.
  OpenOptions remote = Options();
  remote.host_id = 0xfeedface;
  remote.node = 1;
  auto other = Pool::Open(path_, remote);
  ASSERT_TRUE(other.ok());
  auto d = Payload(1, 2048);
  ASSERT_TRUE(pool->Put(MakeHash(1), d).ok());
  ASSERT_TRUE((*other)->Pin(MakeHash(1)).ok());
  ASSERT_TRUE((*other)->Reserve(MakeHash(2), 2048).ok());
  ASSERT_TRUE(pool->Tick().ok());
  EXPECT_EQ(pool->Stats().total_pins, 1u);  // lease still valid: nothing taken
  clock_.Advance(SmallGeometry().lease + 1);
  ASSERT_TRUE(pool->Tick().ok());  // our lease renewed, theirs expired
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.live_procs, 1u);
  EXPECT_EQ(s.total_pins, 0u);
  EXPECT_EQ(s.writing_entries, 0u);
  EXPECT_EQ(s.reclaimed_procs, 1u);
  EXPECT_TRUE(pool->Delete(MakeHash(1)).ok());  // no longer pinned
  other->reset();                               // a late close must not disturb anything
  EXPECT_EQ(pool->Stats().live_procs, 1u);
}

INSTANTIATE_TEST_SUITE_P(Models, PoolTest,
                         ::testing::Values(MemoryModel::kCoherent, MemoryModel::kNonCoherent),
                         [](const auto& info) { return std::string(MemoryModelName(info.param)); });

}  // namespace
}  // namespace dualpath::pool
