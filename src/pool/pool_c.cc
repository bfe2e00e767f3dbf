// The C ABI: thin wrappers converting Status to codes and a thread-local message.
#include "dualpath/pool/pool_c.h"

#include <cstring>
#include <string>
#include <vector>

#include "dualpath/pool/pool.h"

using dualpath::Code;
using dualpath::Result;
using dualpath::Status;
using dualpath::pool::BlockHash;
using dualpath::pool::Pool;

struct dp_pool {
  std::unique_ptr<Pool> pool;
};

namespace {

thread_local std::string g_last_error;

int32_t Ret(const Status& s) {
  g_last_error = s.ok() ? std::string() : s.ToString();
  return static_cast<int32_t>(s.code());
}

int32_t Bad(const char* what) {
  return Ret(Status(Code::kInvalidArgument, std::string("pool C API: null ") + what));
}

BlockHash ToHash(const dp_block_hash* h) {
  BlockHash b;
  std::memcpy(b.bytes.data(), h->bytes, 32);
  return b;
}

}  // namespace

extern "C" {

int32_t dp_pool_create(const char* path, uint64_t region_bytes, uint64_t chunk_bytes,
                       int32_t model) {
  if (path == nullptr) return Bad("path");
  dualpath::pool::Geometry g;
  g.region_bytes = region_bytes;
  if (chunk_bytes != 0) g.chunk_bytes = chunk_bytes;
  if (model != 0 && model != 1) {
    return Ret(Status(Code::kInvalidArgument, "pool C API: model must be 0 or 1"));
  }
  g.model = model == 1 ? dualpath::pool::MemoryModel::kNonCoherent
                       : dualpath::pool::MemoryModel::kCoherent;
  return Ret(Pool::Create(path, g));
}

int32_t dp_pool_open(const char* path, uint32_t node, dp_pool** out) {
  if (path == nullptr) return Bad("path");
  if (out == nullptr) return Bad("out");
  dualpath::pool::OpenOptions o;
  o.node = node;
  Result<std::unique_ptr<Pool>> p = Pool::Open(path, o);
  if (!p.ok()) return Ret(p.status());
  *out = new dp_pool{std::move(*p)};
  return Ret(Status::Ok());
}

void dp_pool_close(dp_pool* pool) { delete pool; }

int32_t dp_pool_destroy(const char* path) {
  if (path == nullptr) return Bad("path");
  return Ret(Pool::Destroy(path));
}

int32_t dp_pool_put(dp_pool* pool, const dp_block_hash* hash, const void* data, uint64_t size,
                    uint64_t user_tag) {
  if (pool == nullptr || hash == nullptr || data == nullptr) return Bad("argument");
  return Ret(pool->pool->Put(ToHash(hash),
                             std::span<const std::byte>(static_cast<const std::byte*>(data), size),
                             user_tag));
}

int32_t dp_pool_get(dp_pool* pool, const dp_block_hash* hash, void* out, uint64_t capacity,
                    uint64_t* size, uint64_t* user_tag) {
  if (pool == nullptr || hash == nullptr || out == nullptr) return Bad("argument");
  Result<uint64_t> r = pool->pool->Get(
      ToHash(hash), std::span<std::byte>(static_cast<std::byte*>(out), capacity), user_tag);
  if (!r.ok()) return Ret(r.status());
  if (size) *size = *r;
  return Ret(Status::Ok());
}

int32_t dp_pool_pin(dp_pool* pool, const dp_block_hash* hash, dp_pinned* out) {
  if (pool == nullptr || hash == nullptr || out == nullptr) return Bad("argument");
  Result<dualpath::pool::PinnedBlock> r = pool->pool->Pin(ToHash(hash));
  if (!r.ok()) return Ret(r.status());
  *out = dp_pinned{r->data, r->size, r->user_tag, r->entry};
  return Ret(Status::Ok());
}

int32_t dp_pool_unpin(dp_pool* pool, dp_pinned* block) {
  if (pool == nullptr || block == nullptr) return Bad("argument");
  dualpath::pool::PinnedBlock b{static_cast<const std::byte*>(block->data), block->size,
                                block->user_tag, block->entry};
  Status s = pool->pool->Unpin(b);
  if (s.ok()) *block = dp_pinned{};
  return Ret(s);
}

int32_t dp_pool_delete(dp_pool* pool, const dp_block_hash* hash) {
  if (pool == nullptr || hash == nullptr) return Bad("argument");
  return Ret(pool->pool->Delete(ToHash(hash)));
}

uint64_t dp_pool_longest_prefix(dp_pool* pool, const dp_block_hash* chain, uint64_t n) {
  if (pool == nullptr || (chain == nullptr && n > 0)) return 0;
  std::vector<BlockHash> v;
  v.reserve(n);
  for (uint64_t i = 0; i < n; ++i) v.push_back(ToHash(&chain[i]));
  return pool->pool->LongestPrefix(v);
}

int32_t dp_pool_root_create(dp_pool* pool, const char* name, uint64_t size, void** out) {
  if (pool == nullptr || name == nullptr || out == nullptr) return Bad("argument");
  Result<std::span<std::byte>> r = pool->pool->CreateRoot(name, size);
  if (!r.ok()) return Ret(r.status());
  *out = r->data();
  return Ret(Status::Ok());
}

int32_t dp_pool_root_create_owned(dp_pool* pool, const char* name, uint64_t size, void** out) {
  if (pool == nullptr || name == nullptr || out == nullptr) return Bad("argument");
  Result<std::span<std::byte>> r =
      pool->pool->CreateRoot(name, size, dualpath::pool::RootLifetime::kProcess);
  if (!r.ok()) return Ret(r.status());
  *out = r->data();
  return Ret(Status::Ok());
}

int32_t dp_pool_root_get(dp_pool* pool, const char* name, void** out, uint64_t* size) {
  if (pool == nullptr || name == nullptr || out == nullptr) return Bad("argument");
  Result<std::span<std::byte>> r = pool->pool->GetRoot(name);
  if (!r.ok()) return Ret(r.status());
  *out = r->data();
  if (size) *size = r->size();
  return Ret(Status::Ok());
}

int32_t dp_pool_root_destroy(dp_pool* pool, const char* name) {
  if (pool == nullptr || name == nullptr) return Bad("argument");
  return Ret(pool->pool->DestroyRoot(name));
}

const char* dp_pool_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
