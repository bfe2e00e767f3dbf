// PoolBuffer: an engine's buffer region taken from its node's shared-memory pool (docs/pool.md)
// instead of process memory: one owner-bound root ("engine/<name>", pool::RootLifetime::kProcess)
// of the whole buffer size. While the engine lives the root is its; when the engine exits cleanly
// the destructor destroys the root; when it is killed, the pool's recovery sweep (run by any
// process attached to the pool: another engine's background tick, `dualpath pool stat`, the
// cluster orchestrator) reclaims it, and an engine restarted under the same name takes the name
// back (CreateRoot reclaims a dead owner's root first).
//
// The engine pins no pool blocks: it uses the pool only as an allocator of shared memory, so a
// crash leaves exactly one thing to reclaim, the root.
//
// Ownership: owns its pool attachment; the memory stays mapped until destruction, so whatever is
// registered over it (the transfer engine's region) must be deregistered first.
// Thread safety: immutable after Attach; destroy from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "dualpath/common/status.h"
#include "dualpath/pool/pool.h"

namespace dualpath::engine {

class PoolBuffer {
 public:
  // Opens the pool at `path` (creating it, `pool_bytes` of data, if absent; racing creators are
  // safe) and takes `bytes` as the owner-bound root `root_name`. Errors name the pool and say
  // what to change (kPoolFull: pool too small; kAlreadyExists: a live engine holds the name).
  static Result<std::unique_ptr<PoolBuffer>> Attach(const std::string& path, uint64_t pool_bytes,
                                                    const std::string& root_name, uint64_t bytes);
  ~PoolBuffer();
  PoolBuffer(const PoolBuffer&) = delete;
  PoolBuffer& operator=(const PoolBuffer&) = delete;

  std::byte* data() const { return span_.data(); }
  uint64_t size() const { return span_.size(); }
  const std::string& root_name() const { return root_; }
  const std::string& path() const { return path_; }

 private:
  PoolBuffer() = default;
  std::unique_ptr<pool::Pool> pool_;
  std::span<std::byte> span_;
  std::string root_;
  std::string path_;
};

}  // namespace dualpath::engine
