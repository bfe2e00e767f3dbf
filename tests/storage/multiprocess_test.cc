// Several processes read and write one store directory at once (issue 5, acceptance 4): no torn
// reads (every successful read is exactly the block's bytes, and no file ever fails
// verification), no lost blocks (every block any process published is readable at the end).
// Writers overlap on purpose: each block is published by two processes, often concurrently.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "dualpath/storage/block_store.h"
#include "storage/test_util.h"

namespace dualpath::storage {
namespace {

using testing::HashOf;
using testing::PayloadOf;
using testing::ScratchDir;

constexpr int kProcs = 4;
constexpr uint64_t kBlocks = 96;
constexpr int kRounds = 3;
const kv::BlockShape kShape{2, 16, 2048};  // 64 KiB payload: several pages per file

// Child body. Returns 0 on success, otherwise a code naming the failed check.
int Worker(const std::string& root, int id) {
  StoreOptions o;
  o.root = root;
  o.model_fingerprint = 0xabc;
  o.queue_depth = 8;
  o.sync = SyncMode::kNone;  // durability is not under test; interleaving is
  auto store = BlockStore::Open(o);
  if (!store.ok()) {
    return 10;
  }
  BlockStore& s = **store;
  std::mt19937_64 rng(1000 + id);
  std::vector<AlignedBuffer> bufs;
  for (int k = 0; k < 16; ++k) {
    bufs.emplace_back(BlockStore::FileBytes(kShape));
  }
  for (int round = 0; round < kRounds; ++round) {
    // Write this process's share: block b belongs to processes b % kProcs and (b + 1) % kProcs.
    std::vector<EncodedBlock> mine;
    for (uint64_t b = 0; b < kBlocks; ++b) {
      if (static_cast<int>(b % kProcs) == id || static_cast<int>((b + 1) % kProcs) == id) {
        if (rng() % kRounds == static_cast<uint64_t>(round) || round == kRounds - 1) {
          auto p = PayloadOf(b, kShape.FullBytes());
          auto e = s.Encode(HashOf(b), kShape, p);
          if (!e.ok()) {
            return 11;
          }
          mine.push_back(std::move(*e));
        }
      }
    }
    for (const Status& st : s.WriteBatch(mine)) {
      if (!st.ok()) {
        return 12;
      }
    }
    // Read a random sample of all blocks, including ones other processes may be writing now.
    std::vector<ReadRequest> reqs;
    std::vector<uint64_t> ids;
    for (auto& buf : bufs) {
      uint64_t b = rng() % kBlocks;
      ids.push_back(b);
      reqs.push_back({HashOf(b), buf.span(), kShape.tokens});
    }
    auto results = s.ReadBatch(reqs);
    for (size_t k = 0; k < results.size(); ++k) {
      if (results[k].status.ok()) {
        auto want = PayloadOf(ids[k], kShape.FullBytes());
        if (results[k].block.payload.size() != want.size() ||
            std::memcmp(results[k].block.payload.data(), want.data(), want.size()) != 0) {
          return 13;  // torn or wrong data returned as a hit
        }
      } else if (results[k].status.code() != Code::kStorageMiss) {
        return 14;
      }
    }
  }
  // A torn file would have failed verification (and been quarantined): there must be none.
  if (s.stats().corrupt != 0) {
    return 15;
  }
  return 0;
}

TEST(StorageMultiProcessTest, ConcurrentReadersAndWritersNeitherTearNorLose) {
  ScratchDir scratch;
  std::vector<pid_t> pids;
  for (int id = 0; id < kProcs; ++id) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::_exit(Worker(scratch.path(), id));
    }
    pids.push_back(pid);
  }
  for (int id = 0; id < kProcs; ++id) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[id], &status, 0), pids[id]);
    ASSERT_TRUE(WIFEXITED(status)) << "worker " << id << " died";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "worker " << id << " failed check " << WEXITSTATUS(status);
  }
  // No lost blocks: every block was published (each by two processes) and reads back intact.
  StoreOptions o;
  o.root = scratch.path();
  o.model_fingerprint = 0xabc;
  auto store = BlockStore::Open(o);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().indexed_blocks, kBlocks);
  EXPECT_EQ((*store)->stats().tmp_cleaned, 0u) << "every writer finished its files";
  AlignedBuffer buf(BlockStore::FileBytes(kShape));
  for (uint64_t b = 0; b < kBlocks; ++b) {
    ReadRequest req{HashOf(b), buf.span(), kShape.tokens};
    auto r = (*store)->ReadBatch({&req, 1});
    ASSERT_TRUE(r[0].status.ok()) << b << ": " << r[0].status.ToString();
    auto want = PayloadOf(b, kShape.FullBytes());
    EXPECT_EQ(std::memcmp(r[0].block.payload.data(), want.data(), want.size()), 0) << b;
  }
}

// Threads of one process share one store: the same guarantees.
TEST(StorageMultiProcessTest, ThreadsShareOneStore) {
  ScratchDir scratch;
  StoreOptions o;
  o.root = scratch.path();
  o.model_fingerprint = 0xabc;
  o.sync = SyncMode::kNone;
  auto store = BlockStore::Open(o);
  ASSERT_TRUE(store.ok());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer buf(BlockStore::FileBytes(kShape));
      for (uint64_t b = 0; b < 32; ++b) {
        uint64_t id = (b * 7 + t) % 32;
        auto p = PayloadOf(id, kShape.FullBytes());
        if (!(*store)->Write(HashOf(id), kShape, p).ok()) {
          ++bad;
        }
        ReadRequest req{HashOf(id), buf.span(), 16};
        auto r = (*store)->ReadBatch({&req, 1});
        if (!r[0].status.ok() || std::memcmp(r[0].block.payload.data(), p.data(), p.size()) != 0) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ((*store)->stats().corrupt, 0u);
  EXPECT_EQ((*store)->stats().indexed_blocks, 32u);
  EXPECT_EQ((*store)->read_queue().Snapshot().blocks, 0u);
}

}  // namespace
}  // namespace dualpath::storage
