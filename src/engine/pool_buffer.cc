#include "engine/pool_buffer.h"

#include <fmt/format.h>

#include "dualpath/common/log.h"

namespace dualpath::engine {

Result<std::unique_ptr<PoolBuffer>> PoolBuffer::Attach(const std::string& path, uint64_t pool_bytes,
                                                       const std::string& root_name,
                                                       uint64_t bytes) {
  pool::Geometry g;
  // Engines take roots only (no KV blocks yet): a small index keeps the metadata small. The
  // whole region is reserved at creation (docs/pool.md), so a pool /dev/shm cannot hold fails
  // here with kStorageNoSpace rather than SIGBUS at the first store into a buffer.
  g.index_capacity = 1024;
  const uint64_t chunks = (pool_bytes + g.chunk_bytes - 1) / g.chunk_bytes;
  g.region_bytes = chunks * g.chunk_bytes + (8ull << 20);  // + metadata (a few MiB at most)
  std::unique_ptr<PoolBuffer> b(new PoolBuffer());
  b->path_ = path;
  b->root_ = root_name;
  Result<std::unique_ptr<pool::Pool>> p = pool::Pool::OpenOrCreate(path, g);
  if (!p.ok()) {
    return p.status().WithContext(fmt::format("open or create the node's pool {}", path));
  }
  b->pool_ = std::move(p).value();
  Result<std::span<std::byte>> root =
      b->pool_->CreateRoot(root_name, bytes, pool::RootLifetime::kProcess);
  if (!root.ok()) {
    const pool::PoolStats s = b->pool_->Stats();
    std::string hint;
    if (root.status().code() == Code::kAlreadyExists) {
      hint = "another live engine with this name is attached to the pool";
    } else if (root.status().code() == Code::kPoolFull) {
      hint = fmt::format(
          "{} of {} MiB free; create the pool bigger (--pool-mib) or lower "
          "--buffer-mib",
          (s.free_chunks * s.chunk_bytes) >> 20, (s.num_chunks * s.chunk_bytes) >> 20);
    }
    return root.status().WithContext(fmt::format("take {} MiB as root {} of pool {}{}{}",
                                                 bytes >> 20, root_name, path,
                                                 hint.empty() ? "" : ": ", hint));
  }
  b->span_ = *root;
  return b;
}

PoolBuffer::~PoolBuffer() {
  // Only a root this object took is destroyed: a failed Attach (e.g. the name is held by a live
  // engine) must not touch someone else's root of the same name.
  if (pool_ == nullptr || span_.data() == nullptr) return;
  // Clean exit: give the buffer back now (closing the attachment would drop the owner-bound root
  // at the sweep that follows anyway; this way the intent does not depend on it).
  if (Status s = pool_->DestroyRoot(root_); !s.ok()) {
    log::Warn("engine: destroy pool root {} of {}: {}", root_, path_, s.ToString());
  }
}

}  // namespace dualpath::engine
