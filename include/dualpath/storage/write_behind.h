// WriteBehind: persists blocks in the background so the decode loop never waits for storage
// (DualPath §4.1: every full block of generated tokens is persisted as soon as it is complete).
//
// Submit copies the block into a file image (the caller's buffer may be reused at once) and
// queues it; `writers` worker threads write queued blocks in batches through
// BlockStore::WriteBatch, several batches at once: a block write is a chain of synchronous
// metadata round trips (lookup, create, rename, close) besides its data, and on a storage link
// busy with reads each reply waits behind read data (tens of ms on the testbed's shaped links),
// so one writer at a time caps the write rate far below the link's (docs/engine.md "When a result
// is reported").
// The queue is bounded in bytes: when it is full, Submit either returns kStorageQueueFull (the
// default: the caller keeps the block and offers it again later, or drops it; the decode engine
// keeps it in the request's buffer and retries when on_space says bytes were freed) or waits for
// space, per option. A block already queued is not queued twice. Close (and the destructor)
// flushes everything queued before returning.
//
// Ownership: the store must outlive this object. Thread safety: Submit, Flush, stats and Close may
// be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"
#include "dualpath/kv/layout.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::storage {

struct WriteBehindOptions {
  uint64_t max_queued_bytes = 256ull << 20;  // file bytes queued or being written
  bool block_when_full = false;              // false: Submit returns kStorageQueueFull
  size_t max_batch = 32;                     // blocks per WriteBatch
  // Worker threads, each writing a batch of its own (a worker takes at most its share of what is
  // queued, so a burst spreads over them). At least 1.
  unsigned writers = 4;
  // Called on a worker thread (several may run at once, one per batch) after each batch's
  // WriteBatch, with the batch's file images and
  // their statuses, before the batch counts as finished (so Flush also waits for it). The engine
  // puts the written blocks into the distributed KV store here (docs/store.md "In the system").
  // Empty: none.
  std::function<void(std::span<const EncodedBlock>, std::span<const Status>)> after_write;
  // Called on a worker thread (several may run at once) after each batch finished and its bytes
  // left the queue, with no
  // lock of this object held (so it may call Submit, or take the caller's own lock and wake a
  // thread that waits for space: the decode engine's step loop never waits in Submit, it waits
  // for this). Empty: none.
  std::function<void()> on_space;
};

struct WriteBehindStats {
  uint64_t submitted = 0;   // accepted by Submit
  uint64_t duplicates = 0;  // Submit of a block already queued (accepted, not queued again)
  uint64_t rejected = 0;    // kStorageQueueFull
  uint64_t written = 0;     // batches' OK results (published or already present)
  uint64_t failed = 0;      // batches' errors
  uint64_t queued_bytes = 0;
  uint64_t queued_blocks = 0;
};

class WriteBehind {
 public:
  WriteBehind(BlockStore& store, const WriteBehindOptions& options);
  ~WriteBehind();
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  // Queues a block. kStorageQueueFull when full (non-blocking mode), kStorageClosed after Close,
  // kInvalidArgument for a payload that does not match the shape or is larger than the queue.
  Status Submit(const kv::BlockHash& hash, const kv::BlockShape& shape,
                std::span<const std::byte> payload);
  // Waits until every block submitted before the call is written (or has failed).
  void Flush();
  // Blocks queued so far, a sequence number: once FlushTo(n) returns the first n blocks queued
  // are written (or have failed), whichever worker wrote them and in whatever order they ended. A
  // block a Submit accepted (or found already queued) before accepted() was read is among them,
  // when the submitting thread is the only one (another thread may still be encoding the original
  // of a duplicate).
  uint64_t accepted() const;
  void FlushTo(uint64_t seq);
  // How many of the first blocks queued are all finished: FlushTo(n) returns once this is >= n.
  uint64_t finished() const;
  // Flushes, then stops the worker. Idempotent.
  void Close();

  WriteBehindStats stats() const;
  // The most recent write error (OK if none): write-behind errors have no caller to return to.
  Status last_error() const;

 private:
  void Run();
  Status Reserve(const kv::BlockHash& hash, uint64_t bytes, std::unique_lock<std::mutex>& lock);

  BlockStore& store_;
  const WriteBehindOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;            // worker: queue non-empty or closing
  std::condition_variable space_cv_;           // submitters: space freed; flushers: progress
  std::deque<EncodedBlock> queue_;             // guarded by mu_
  std::unordered_set<kv::BlockHash> pending_;  // queued, reserved or in flight; guarded by mu_
  uint64_t reserved_bytes_ = 0;                // guarded by mu_
  uint64_t enqueued_seq_ = 0;                  // blocks ever accepted; guarded by mu_
  uint64_t dequeued_seq_ = 0;                  // blocks ever taken by a worker; guarded by mu_
  // The first finished_seq_ blocks are all finished; batches that finished past a batch still in
  // flight wait here (begin -> end of their sequence numbers). Guarded by mu_.
  uint64_t finished_seq_ = 0;
  std::map<uint64_t, uint64_t> finished_ahead_;
  bool closing_ = false;    // guarded by mu_
  WriteBehindStats stats_;  // guarded by mu_
  Status last_error_;       // guarded by mu_
  const size_t writers_;    // worker threads (options_.writers, at least 1)
  std::vector<std::thread> workers_;
};

}  // namespace dualpath::storage
