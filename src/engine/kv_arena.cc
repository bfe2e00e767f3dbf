#include "engine/kv_arena.h"

#include <fmt/format.h>

#include "dualpath/common/check.h"

namespace dualpath::engine {
namespace {
constexpr uint64_t kAlign = 4096;
uint64_t RoundUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

KvArena::KvArena(std::byte* base, uint64_t size, int64_t token_limit)
    : base_(base), size_(size / kAlign * kAlign), token_limit_(token_limit) {
  // The region itself comes from UCX or mmap and is page-aligned; offsets stay page-aligned.
  if (size_ > 0) {
    free_.emplace(0, size_);
  }
}

std::byte* KvArena::TryAllocateLocked(uint64_t bytes, int64_t tokens) {
  if (token_limit_ > 0 && used_tokens_ + tokens > token_limit_) {
    return nullptr;
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) {
      continue;
    }
    uint64_t off = it->first;
    uint64_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) {
      free_.emplace(off + bytes, rest);
    }
    used_.emplace(off, Used{bytes, tokens});
    used_bytes_ += bytes;
    used_tokens_ += tokens;
    return base_ + off;
  }
  return nullptr;
}

Result<std::byte*> KvArena::Allocate(uint64_t bytes, int64_t tokens,
                                     std::chrono::steady_clock::time_point deadline) {
  bytes = RoundUp(bytes == 0 ? 1 : bytes);
  if (bytes > size_ || (token_limit_ > 0 && tokens > token_limit_)) {
    return Status(Code::kEngineNoRoom,
                  fmt::format("area of {} bytes / {} tokens exceeds the engine's buffer ({} bytes, "
                              "{} tokens; raise --buffer-mib / --hbm-tokens)",
                              bytes, tokens, size_, token_limit_));
  }
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (cancelled_) {
      return Status(Code::kEngineStopped, "engine stopping while waiting for buffer memory");
    }
    if (std::byte* p = TryAllocateLocked(bytes, tokens)) {
      return p;
    }
    if (freed_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (std::byte* p = TryAllocateLocked(bytes, tokens)) {
        return p;
      }
      return Timeout(
          fmt::format("no {} bytes of buffer memory free before the deadline ({} of {} "
                      "in use)",
                      bytes, used_bytes_, size_));
    }
  }
}

void KvArena::Free(std::byte* p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t off = static_cast<uint64_t>(p - base_);
    auto it = used_.find(off);
    DUALPATH_CHECK(it != used_.end(), "KvArena::Free of an address it did not allocate");
    uint64_t len = it->second.bytes;
    used_bytes_ -= len;
    used_tokens_ -= it->second.tokens;
    used_.erase(it);
    // Coalesce with the free neighbours on both sides.
    auto next = free_.lower_bound(off);
    if (next != free_.end() && off + len == next->first) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += len;
        freed_cv_.notify_all();
        return;
      }
    }
    free_.emplace(off, len);
  }
  freed_cv_.notify_all();
}

void KvArena::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  freed_cv_.notify_all();
}

uint64_t KvArena::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_bytes_;
}

int64_t KvArena::used_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_tokens_;
}

}  // namespace dualpath::engine
