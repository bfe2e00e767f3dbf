// KvStore: one node's KV tiers behind the verbs engines' connectors use (Mooncake's store is the
// reference shape): put blocks from caller memory, get blocks into caller memory, count leading
// hits, remove. It is what the Python class `dualpath.KVStore` wraps; it has no Python in it.
//
// Tiers, both optional (at least one):
//  - the node's shared-memory pool (pool::Pool at a path, /dev/shm/... by default): every process
//    on the node that opens the same path shares it (created by the first, sized then);
//  - the persistent tier (storage::BlockStore under a directory on any POSIX or distributed file
//    system), one model directory per `name_space`.
// Values are opaque byte strings (one KV block of whatever layout the engine uses). A put writes
// through to both tiers; a get tries the pool, then the persistent tier, and promotes a persistent
// hit into the pool. Every byte handed back has been verified: pool blocks carry the XXH3-64 of
// their payload as the pool entry's tag, checked while copying out; persistent blocks are block
// files (kv/block_file.h) with their own checksums. A block that fails a check is a miss (counted
// in `corrupt`, dropped from its tier), never data.
//
// Keys are kv::BlockHash values (the Python layer turns vLLM's 32-byte hashes and SGLang's string
// keys into them).
//
// Buffers: callers pass raw (pointer, size) pairs. The Python layer proves them valid, either
// because they came from a live buffer object or because they lie inside a range registered with
// RegisterBuffer (checked with CheckRegistered, like an RDMA engine's registration).
//
// Thread safety: every method may be called from any thread concurrently. Close() waits for calls
// in flight and makes every later call fail with kStorageClosed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"
#include "dualpath/pool/pool.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::python {

struct KvStoreOptions {
  std::string pool_path;               // empty: no pool tier
  uint64_t pool_bytes = 1ull << 30;    // region size if this call creates the pool
  std::string store_path;              // empty: no persistent tier
  std::string name_space = "default";  // names the persistent tier's model directory
  uint64_t store_capacity_bytes = 0;   // LRU bound of the persistent tier (0 = unlimited)
  storage::SyncMode sync = storage::SyncMode::kData;
  // Threads that copy (and checksum) pool blocks of one batch in parallel, the calling thread
  // included; a batch of less than kParallelCopyBytes stays on the caller. 0: the machine's
  // hardware threads, at most 8. One thread copies at a few GB/s (checksum included), well below
  // a GPU node's memory bandwidth and its host-to-device copy rate.
  unsigned copy_threads = 0;
};

// Caller memory for one block.
struct ConstBuf {
  const std::byte* data = nullptr;
  uint64_t size = 0;
};
struct MutBuf {
  std::byte* data = nullptr;
  uint64_t size = 0;
};

struct KvStoreStats {
  uint64_t puts = 0, put_errors = 0;
  uint64_t gets = 0, pool_hits = 0, store_hits = 0, misses = 0, corrupt = 0;
  uint64_t bytes_put = 0, bytes_got = 0;
  uint64_t removes = 0;
  bool has_pool = false, has_store = false;
  pool::PoolStats pool;
  storage::StoreStats store;
};

class KvStore {
 public:
  // Opens (or creates) the tiers. kInvalidArgument if neither tier is given or the namespace is
  // empty; the tiers' own errors (kPermissionDenied naming the path, kPoolTooSmall, ...) otherwise.
  static Result<std::unique_ptr<KvStore>> Open(const KvStoreOptions& options);
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // Stores each block. One status per key: OK (also when the block was already there), else why
  // that block is not stored. Sizes must be in [1, kMaxValueBytes] (checked by the caller layer).
  std::vector<Status> PutBatch(std::span<const kv::BlockHash> keys, std::span<const ConstBuf> bufs);
  // Copies each block into its buffer. Per key: the block's size, kStorageMiss (absent or failed
  // verification: the buffer's contents are then unspecified), kOutOfRange (the block is larger
  // than the buffer; nothing copied), or a tier error.
  std::vector<Result<uint64_t>> GetBatch(std::span<const kv::BlockHash> keys,
                                         std::span<const MutBuf> bufs);
  // Number of leading keys present in some tier (pool first, lock-free; then the file system).
  Result<size_t> LeadingHits(std::span<const kv::BlockHash> keys);
  // Per key: present in some tier.
  Result<std::vector<bool>> Exists(std::span<const kv::BlockHash> keys);
  // Removes the block from both tiers; kNotFound if neither had it, kPoolPinned if a reader of
  // the pool holds it right now.
  Status Remove(const kv::BlockHash& key);

  // Buffer registration (see the class comment). Registering an overlapping range is
  // kInvalidArgument; unregistering an unknown address is kNotFound.
  Status RegisterBuffer(uintptr_t addr, uint64_t size);
  Status UnregisterBuffer(uintptr_t addr);
  // kInvalidArgument naming the range unless [addr, addr + size) lies inside one registered range.
  Status CheckRegistered(uintptr_t addr, uint64_t size) const;

  Result<KvStoreStats> Stats();
  // Waits for calls in flight, then detaches from the pool and closes the persistent tier.
  void Close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // The largest value: 1 GiB (a KV block of any real model and block size is far below it).
  static constexpr uint64_t kMaxValueBytes = 1ull << 30;
  // The batch size (bytes) from which pool copies are split over copy_threads.
  static constexpr uint64_t kParallelCopyBytes = 4ull << 20;

 private:
  explicit KvStore(const KvStoreOptions& options);
  Status CheckOpen() const;
  // Pool write: reserve, copy while checksumming, publish with the checksum as the tag.
  Status PutToPool(const kv::BlockHash& key, ConstBuf buf);
  // Pool read: pin, copy while checksumming, unpin. kStorageMiss if absent or corrupt.
  Result<uint64_t> GetFromPool(const kv::BlockHash& key, MutBuf buf);
  // Runs fn(i) for i in [0, n), split into contiguous ranges over up to copy_threads threads
  // when `bytes` reaches kParallelCopyBytes; returns when every call has returned.
  template <typename Fn>
  void ForEachParallel(size_t n, uint64_t bytes, Fn&& fn) const;
  unsigned copy_threads_ = 1;

  KvStoreOptions options_;
  std::unique_ptr<pool::Pool> pool_;
  std::unique_ptr<storage::BlockStore> store_;
  // Calls hold it shared; Close holds it exclusively.
  mutable std::shared_mutex close_mu_;
  std::atomic<bool> closed_{false};

  mutable std::mutex reg_mu_;
  std::map<uintptr_t, uint64_t> registered_;  // start -> size, non-overlapping

  struct Counters {
    std::atomic<uint64_t> puts{0}, put_errors{0}, gets{0}, pool_hits{0}, store_hits{0}, misses{0},
        corrupt{0}, bytes_put{0}, bytes_got{0}, removes{0};
  };
  Counters counters_;
};

}  // namespace dualpath::python
