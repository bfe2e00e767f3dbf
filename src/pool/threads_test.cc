// Many threads on one region, in both memory models: through one shared Pool object and through
// one Pool object per thread (separate process slots, the multi-process code paths). Every read
// is verified against the checksum stored with the block. Built for the tsan preset.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "dualpath/pool/pool.h"
#include "pool/test_util.h"

namespace dualpath::pool {
namespace {

using testing::Checksum;
using testing::FillPayload;
using testing::MakeHash;
using testing::TempDir;

// Keys are shared by all threads; a key's payload is a function of the key, so any reader can
// verify any block.
size_t SizeOf(uint64_t key) { return 1000 + (key % 7) * 3000; }

struct Counts {
  std::atomic<uint64_t> verified{0}, mismatches{0}, ops{0};
};

void Worker(Pool& pool, uint64_t seed, int ops, Counts& c) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> buf(32 << 10);
  std::vector<PinnedBlock> pins;
  for (int i = 0; i < ops; ++i) {
    const uint64_t key = rng() % 64;
    const BlockHash h = MakeHash(key);
    switch (rng() % 6) {
      case 0: {
        std::vector<std::byte> d(SizeOf(key));
        FillPayload(key, d);
        Status s = pool.Put(h, d, Checksum(d));
        if (!s.ok() && s.code() != Code::kAlreadyExists && s.code() != Code::kPoolFull) {
          ADD_FAILURE() << s.ToString();
        }
        break;
      }
      case 1: {
        uint64_t tag = 0;
        Result<uint64_t> n = pool.Get(h, buf, &tag);
        if (n.ok()) {
          (Checksum({buf.data(), *n}) == tag ? c.verified : c.mismatches)++;
        }
        break;
      }
      case 2: {
        Result<PinnedBlock> p = pool.Pin(h);
        if (p.ok()) pins.push_back(*p);
        break;
      }
      case 3:
        if (!pins.empty()) {
          PinnedBlock& p = pins.back();
          (Checksum({p.data, p.size}) == p.user_tag ? c.verified : c.mismatches)++;
          EXPECT_TRUE(pool.Unpin(p).ok());
          pins.pop_back();
        }
        break;
      case 4: {
        Status s = pool.Delete(h);
        EXPECT_TRUE(s.ok() || s.code() == Code::kNotFound || s.code() == Code::kPoolPinned)
            << s.ToString();
        break;
      }
      default:
        (void)pool.Contains(h);
        break;
    }
    c.ops++;
  }
  for (PinnedBlock& p : pins) {
    (Checksum({p.data, p.size}) == p.user_tag ? c.verified : c.mismatches)++;
    EXPECT_TRUE(pool.Unpin(p).ok());
  }
}

class ThreadsTest : public ::testing::TestWithParam<std::tuple<MemoryModel, bool>> {};

TEST_P(ThreadsTest, ConcurrentOpsVerifyChecksums) {
  const auto [model, per_thread_pool] = GetParam();
  TempDir dir;
  const std::string path = dir.File("region");
  Geometry g;
  g.chunk_bytes = 64 << 10;
  g.region_bytes = 3 << 20;  // small: eviction happens
  g.max_procs = 8;
  g.pin_records = 64;
  g.num_nodes = 2;
  g.model = model;
  ASSERT_TRUE(Pool::Create(path, g).ok());
  OpenOptions o;
  o.background_thread = false;
  o.local_dir = dir.path();
  constexpr int kThreads = 4;
  constexpr int kOps = 1500;
  std::vector<std::unique_ptr<Pool>> pools;
  for (int t = 0; t < (per_thread_pool ? kThreads : 1); ++t) {
    OpenOptions to = o;
    to.node = static_cast<uint32_t>(t % 2);  // two nodes: exercises the global tier
    auto p = Pool::Open(path, to);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pools.push_back(std::move(*p));
  }
  Counts c;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    Pool& pool = *pools[per_thread_pool ? t : 0];
    threads.emplace_back([&pool, t, &c] { Worker(pool, 1234 + t, kOps, c); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.mismatches.load(), 0u);
  EXPECT_GT(c.verified.load(), 100u);
  EXPECT_EQ(c.ops.load(), uint64_t{kThreads} * kOps);
  PoolStats s = pools[0]->Stats();
  EXPECT_EQ(s.total_pins, 0u);
  EXPECT_EQ(s.writing_entries, 0u);
  ASSERT_TRUE(pools[0]->Recover().ok());  // the sweep agrees with the incremental state
  PoolStats r = pools[0]->Stats();
  EXPECT_EQ(r.free_chunks, s.free_chunks);
  EXPECT_EQ(r.ready_entries, s.ready_entries);
  // Detach the node-1 pools before pools[0], whose process hosts the lock manager (node 0).
  while (!pools.empty()) pools.pop_back();
}

INSTANTIATE_TEST_SUITE_P(Models, ThreadsTest,
                         ::testing::Combine(::testing::Values(MemoryModel::kCoherent,
                                                              MemoryModel::kNonCoherent),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(MemoryModelName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_pool_per_thread" : "_shared_pool");
                         });

}  // namespace
}  // namespace dualpath::pool
