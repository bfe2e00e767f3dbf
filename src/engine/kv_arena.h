// KvArena: the allocator over an engine's registered region (its PE/DE buffers and "HBM").
//
// The region is one transfer-registered range, so anything allocated from it can be the source
// or target of a one-sided put without another registration. First-fit over a free list sorted
// by address, with coalescing; allocations are 4096-aligned (page-aligned, so a request's area
// never shares a page with another's). Requests that do not fit now wait (bounded by a deadline)
// until another request frees memory; a request larger than the whole region is refused at once.
// Tokens are accounted beside bytes so the engine can report free "HBM" tokens to the scheduler.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "dualpath/common/status.h"

namespace dualpath::engine {

class KvArena {
 public:
  // `token_limit` (0: unlimited) caps the tokens allocated at once (the --hbm-tokens flag).
  KvArena(std::byte* base, uint64_t size, int64_t token_limit);

  // Waits until `bytes` (holding `tokens` tokens) fit, then returns the area. kEngineNoRoom if it
  // can never fit (larger than the region or the token limit), kTimeout at the deadline,
  // kEngineStopped after Cancel().
  Result<std::byte*> Allocate(uint64_t bytes, int64_t tokens,
                              std::chrono::steady_clock::time_point deadline);
  // Precondition (checked): p was returned by Allocate and not freed since.
  void Free(std::byte* p);
  // Wakes every waiter (they fail with kEngineStopped) and refuses later allocations.
  void Cancel();

  uint64_t capacity() const { return size_; }
  uint64_t used_bytes() const;
  int64_t used_tokens() const;
  int64_t token_limit() const { return token_limit_; }

 private:
  std::byte* TryAllocateLocked(uint64_t bytes, int64_t tokens);

  std::byte* const base_;
  const uint64_t size_;
  const int64_t token_limit_;
  mutable std::mutex mu_;
  std::condition_variable freed_cv_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length; guarded by mu_
  struct Used {
    uint64_t bytes;
    int64_t tokens;
  };
  std::map<uint64_t, Used> used_;  // offset -> allocation; guarded by mu_
  uint64_t used_bytes_ = 0;        // guarded by mu_
  int64_t used_tokens_ = 0;        // guarded by mu_
  bool cancelled_ = false;         // guarded by mu_
};

}  // namespace dualpath::engine
