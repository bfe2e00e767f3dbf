#include "dualpath/storage/write_behind.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "dualpath/kv/block_file.h"
#include "storage/test_util.h"

namespace dualpath::storage {
namespace {

using testing::HashOf;
using testing::PayloadOf;
using testing::PublishGate;
using testing::ScratchDir;
using testing::SmallShape;

class WriteBehindTest : public ::testing::Test {
 protected:
  std::unique_ptr<BlockStore> Open(StorageFaults* faults) {
    StoreOptions o;
    o.root = dir_.path();
    o.model_fingerprint = 77;
    o.faults = faults;
    auto s = BlockStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(*s);
  }
  bool Readable(BlockStore& s, uint64_t i) {
    AlignedBuffer buf(BlockStore::FileBytes(SmallShape()));
    ReadRequest req{HashOf(i), buf.span(), 4};
    return s.ReadBatch({&req, 1})[0].status.ok();
  }
  ScratchDir dir_;
};

TEST_F(WriteBehindTest, CloseFlushesEverythingSubmitted) {
  auto store = Open(nullptr);
  {
    WriteBehind wb(*store, WriteBehindOptions{});
    for (uint64_t i = 0; i < 50; ++i) {
      auto p = PayloadOf(i, SmallShape().FullBytes());
      ASSERT_TRUE(wb.Submit(HashOf(i), SmallShape(), p).ok());
    }
    // The same block again while (possibly) still queued: accepted, written once.
    auto p = PayloadOf(0, SmallShape().FullBytes());
    ASSERT_TRUE(wb.Submit(HashOf(0), SmallShape(), p).ok());
    wb.Close();
    WriteBehindStats st = wb.stats();
    EXPECT_EQ(st.submitted + st.duplicates, 51u);
    EXPECT_EQ(st.written, st.submitted);
    EXPECT_EQ(st.failed, 0u);
    EXPECT_EQ(st.queued_bytes, 0u);
    EXPECT_EQ(wb.Submit(HashOf(99), SmallShape(), p).code(), Code::kStorageClosed);
  }
  for (uint64_t i = 0; i < 50; ++i) {
    EXPECT_TRUE(Readable(*store, i)) << i;
  }
}

// after_write (the engine's put into the KV store, docs/store.md "In the system") sees every
// written block's file image with its status, and Flush returns only after it ran for every block
// submitted before.
TEST_F(WriteBehindTest, AfterWriteSeesEveryWrittenFileImageBeforeFlushReturns) {
  auto store = Open(nullptr);
  std::mutex mu;
  std::map<kv::BlockHash, std::vector<std::byte>> seen;
  WriteBehindOptions o;
  o.max_batch = 4;
  o.after_write = [&](std::span<const EncodedBlock> blocks, std::span<const Status> results) {
    ASSERT_EQ(blocks.size(), results.size());
    std::lock_guard lock(mu);
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_TRUE(results[i].ok()) << results[i].ToString();
      seen[blocks[i].hash].assign(blocks[i].file.data(),
                                  blocks[i].file.data() + blocks[i].file_bytes);
    }
  };
  WriteBehind wb(*store, o);
  for (uint64_t i = 0; i < 10; ++i) {
    auto p = PayloadOf(i, SmallShape().FullBytes());
    ASSERT_TRUE(wb.Submit(HashOf(i), SmallShape(), p).ok());
  }
  wb.Flush();
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), 10u);
  for (uint64_t i = 0; i < 10; ++i) {
    // The image is the block file: it decodes as block i with block i's payload.
    const std::vector<std::byte>& file = seen[HashOf(i)];
    auto d = kv::DecodeBlockFile(file, 77, HashOf(i));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    auto p = PayloadOf(i, SmallShape().FullBytes());
    EXPECT_TRUE(std::equal(d->payload.begin(), d->payload.end(), p.begin(), p.end()));
  }
}

TEST_F(WriteBehindTest, FullQueueRejectsWithoutBlockingThenDrains) {
  PublishGate gate;
  auto store = Open(&gate);
  WriteBehindOptions o;
  o.max_queued_bytes = 2 * BlockStore::FileBytes(SmallShape());
  o.max_batch = 1;
  WriteBehind wb(*store, o);
  auto p = PayloadOf(0, SmallShape().FullBytes());
  ASSERT_TRUE(wb.Submit(HashOf(0), SmallShape(), p).ok());
  gate.WaitArrived(1);  // block 0 is in flight, stuck before its publish
  ASSERT_TRUE(wb.Submit(HashOf(1), SmallShape(), p).ok());
  Status full = wb.Submit(HashOf(2), SmallShape(), p);
  EXPECT_EQ(full.code(), Code::kStorageQueueFull) << full.ToString();
  EXPECT_EQ(wb.stats().rejected, 1u);
  EXPECT_EQ(wb.stats().queued_blocks, 2u);
  EXPECT_FALSE(store->Contains(HashOf(0)));  // not published until the gate opens
  gate.Open();
  wb.Flush();
  EXPECT_TRUE(store->Contains(HashOf(0)));
  EXPECT_TRUE(store->Contains(HashOf(1)));
  EXPECT_FALSE(store->Contains(HashOf(2)));
  // Payload 0 was written under hash 1 as well; it must read back as block 1's file, intact.
  EXPECT_TRUE(Readable(*store, 1));
}

TEST_F(WriteBehindTest, BlockingModeWaitsForSpace) {
  PublishGate gate;
  auto store = Open(&gate);
  WriteBehindOptions o;
  o.max_queued_bytes = BlockStore::FileBytes(SmallShape());
  o.block_when_full = true;
  WriteBehind wb(*store, o);
  auto p0 = PayloadOf(0, SmallShape().FullBytes());
  ASSERT_TRUE(wb.Submit(HashOf(0), SmallShape(), p0).ok());
  gate.WaitArrived(1);
  Status second;
  std::thread t([&] {
    auto p1 = PayloadOf(1, SmallShape().FullBytes());
    second = wb.Submit(HashOf(1), SmallShape(), p1);
  });
  gate.Open();  // frees block 0's bytes; the waiting Submit then goes through
  t.join();
  EXPECT_TRUE(second.ok()) << second.ToString();
  wb.Close();
  EXPECT_EQ(wb.stats().rejected, 0u);
  EXPECT_TRUE(Readable(*store, 0));
  EXPECT_TRUE(Readable(*store, 1));
}

// on_space is how the decode engine's step loop learns it may offer the blocks it kept when the
// queue was full (it never waits in Submit): it runs after a batch's bytes left the queue, with no
// lock of the write-behind held, so a Submit refused as full before goes through from inside it.
TEST_F(WriteBehindTest, OnSpaceRunsAfterBytesAreFreedAndMaySubmit) {
  PublishGate gate;
  auto store = Open(&gate);
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  Status retried = Status(Code::kInternal, "not retried");
  WriteBehind* wbp = nullptr;
  const auto p1 = PayloadOf(1, SmallShape().FullBytes());
  WriteBehindOptions o;
  o.max_queued_bytes = BlockStore::FileBytes(SmallShape());  // one block
  o.max_batch = 1;
  o.on_space = [&] {
    std::lock_guard lock(mu);
    if (++calls == 1) {
      retried = wbp->Submit(HashOf(1), SmallShape(), p1);  // the kept block, offered again
    }
    cv.notify_all();
  };
  WriteBehind wb(*store, o);
  wbp = &wb;
  const auto p0 = PayloadOf(0, SmallShape().FullBytes());
  ASSERT_TRUE(wb.Submit(HashOf(0), SmallShape(), p0).ok());
  gate.WaitArrived(1);  // block 0 in flight, held before its publish: its bytes are still queued
  EXPECT_EQ(wb.Submit(HashOf(1), SmallShape(), p1).code(), Code::kStorageQueueFull);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(calls, 0);  // nothing finished yet
  }
  gate.Open();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return calls >= 1; });
    EXPECT_TRUE(retried.ok()) << retried.ToString();
  }
  wb.Close();
  EXPECT_EQ(wb.stats().written, 2u);
  EXPECT_TRUE(Readable(*store, 0));
  EXPECT_TRUE(Readable(*store, 1));
}

// FlushTo(accepted() after a block) waits for that block and those queued before it, not for the
// blocks queued after it (the decode engine reports each result once its own blocks are written).
// Block 1's publish is held: FlushTo for block 0 must return while it is (the old whole-queue
// Flush would wait forever).
TEST_F(WriteBehindTest, FlushToWaitsForBlocksUpToTheSequenceOnly) {
  PublishGate gate([](const kv::BlockHash& h) { return h == HashOf(1); });
  auto store = Open(&gate);
  WriteBehindOptions o;
  o.max_batch = 1;
  WriteBehind wb(*store, o);
  EXPECT_EQ(wb.accepted(), 0u);
  const auto p = PayloadOf(0, SmallShape().FullBytes());
  ASSERT_TRUE(wb.Submit(HashOf(0), SmallShape(), p).ok());
  const uint64_t after0 = wb.accepted();
  EXPECT_EQ(after0, 1u);
  ASSERT_TRUE(wb.Submit(HashOf(1), SmallShape(), p).ok());
  wb.FlushTo(after0);
  EXPECT_TRUE(store->Contains(HashOf(0)));
  gate.WaitArrived(1);  // block 1 is held before its publish
  EXPECT_FALSE(store->Contains(HashOf(1)));
  gate.Open();
  wb.FlushTo(wb.accepted());
  EXPECT_TRUE(store->Contains(HashOf(1)));
  EXPECT_EQ(wb.accepted(), 2u);
}

// Several writers: a block whose write is slow (block 0, held before its publish) does not hold
// the blocks queued after it, which another worker writes meanwhile (with one writer block 1
// waited behind block 0: this test fails at its hang guard); and FlushTo still means "the first n
// blocks": block 1 finished first, but finished() stays 0 until block 0 is through.
TEST_F(WriteBehindTest, OtherWritersGoOnWhileOneWriteIsSlowAndFlushToKeepsQueueOrder) {
  PublishGate gate([](const kv::BlockHash& h) { return h == HashOf(0); });
  auto store = Open(&gate);
  std::mutex mu;
  std::condition_variable cv;
  bool one_written = false;
  WriteBehindOptions o;
  o.max_batch = 1;
  o.writers = 2;
  o.after_write = [&](std::span<const EncodedBlock> blocks, std::span<const Status> results) {
    std::lock_guard lock(mu);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i].hash == HashOf(1) && results[i].ok()) one_written = true;
    }
    cv.notify_all();
  };
  WriteBehind wb(*store, o);
  const auto p = PayloadOf(0, SmallShape().FullBytes());
  ASSERT_TRUE(wb.Submit(HashOf(0), SmallShape(), p).ok());
  gate.WaitArrived(1);  // block 0's writer is held before its publish
  ASSERT_TRUE(wb.Submit(HashOf(1), SmallShape(), p).ok());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return one_written; }))
        << "block 1 waited for block 0's writer";
  }
  EXPECT_TRUE(store->Contains(HashOf(1)));
  EXPECT_FALSE(store->Contains(HashOf(0)));
  EXPECT_EQ(wb.finished(), 0u);  // block 0, queued first, is not finished
  gate.Open();
  wb.FlushTo(2);
  EXPECT_EQ(wb.finished(), 2u);
  EXPECT_TRUE(store->Contains(HashOf(0)));
  EXPECT_EQ(wb.stats().written, 2u);
}

TEST_F(WriteBehindTest, OversizedBlockAndBadPayloadAreRejected) {
  auto store = Open(nullptr);
  WriteBehindOptions o;
  o.max_queued_bytes = 4096;
  WriteBehind wb(*store, o);
  auto p = PayloadOf(0, SmallShape().FullBytes());
  EXPECT_EQ(wb.Submit(HashOf(0), SmallShape(), p).code(), Code::kInvalidArgument);
  WriteBehind wb2(*store, WriteBehindOptions{});
  EXPECT_EQ(wb2.Submit(HashOf(0), SmallShape(), std::span(p).first(100)).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(wb2.stats().queued_bytes, 0u);
}

}  // namespace
}  // namespace dualpath::storage
