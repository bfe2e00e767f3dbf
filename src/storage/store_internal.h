// Private parts of BlockStore shared by its .cc files (lifecycle, read path, write path, scan).
#pragma once

#include <fcntl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dualpath/storage/block_store.h"
#include "storage/lru_index.h"
#include "storage/uring_engine.h"

namespace dualpath::storage {

// io_uring engines for concurrent batches: a batch borrows one, so two threads never share a
// ring. Engines are created on demand and kept for reuse (ring setup costs a few syscalls and
// locked memory).
class BlockStore::EnginePool {
 public:
  explicit EnginePool(unsigned depth) : depth_(depth) {}
  Result<std::unique_ptr<internal::UringEngine>> Acquire();
  void Release(std::unique_ptr<internal::UringEngine> engine);

 private:
  unsigned depth_;
  std::mutex mu_;
  std::vector<std::unique_ptr<internal::UringEngine>> free_;  // guarded by mu_
};

struct BlockStore::Counters {
  std::atomic<uint64_t> reads{0}, hits{0}, misses{0}, corrupt{0}, read_errors{0};
  std::atomic<uint64_t> writes{0}, write_dedup{0}, write_errors{0}, evictions{0}, tmp_cleaned{0};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
};

struct BlockStore::IndexState {
  std::mutex mu;
  internal::LruIndex lru;  // guarded by mu
};

namespace internal {

// Open flags for the store's I/O mode.
inline int DirectFlag(bool direct) { return direct ? O_DIRECT : 0; }

// Short hash for messages: the first 12 hex digits.
inline std::string ShortHex(const kv::BlockHash& hash) { return hash.Hex().substr(0, 12); }

// mkdir -p; EEXIST is fine (another process may be creating the same directory).
Status MakeDirs(const std::string& path);

}  // namespace internal
}  // namespace dualpath::storage
