#include "python/kv_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "dualpath/common/check.h"
#include "dualpath/common/parallel.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/copy_verify.h"
#include "dualpath/kv/layout.h"

namespace dualpath::python {
namespace {

// A value of n bytes is stored as a one-layer, one-token block of n bytes per token: the block
// file format carries the size, checksum and key; the layout means nothing to KvStore.
kv::BlockShape ValueShape(uint64_t bytes) { return kv::BlockShape{1, 1, bytes}; }

// Bounds the aligned staging memory one batch holds for the persistent tier.
constexpr uint64_t kStageBytesPerRound = 64ull << 20;

// The pool's checksum (each entry's user tag) is seeded with the entry's key: the pool's index
// lies in memory every attached process may write, so a checksum of the bytes alone would let an
// entry of key B that points at key A's block pass as B. No model fingerprint: the pool is not
// per namespace (every namespace of a pool sees the same keys).
uint64_t PoolSeed(const kv::BlockHash& key) { return kv::KeySeed(0, key); }

Status Miss(const kv::BlockHash& key, std::string_view why) {
  return Status(Code::kStorageMiss, "block " + key.Hex().substr(0, 16) + ": " + std::string(why));
}

}  // namespace

KvStore::KvStore(const KvStoreOptions& options) : options_(options) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  copy_threads_ = options.copy_threads == 0 ? std::min(hw, 8u) : options.copy_threads;
}

template <typename Fn>
void KvStore::ForEachParallel(size_t n, uint64_t bytes, Fn&& fn) const {
  ParallelFor(n, bytes < kParallelCopyBytes ? 1 : ThreadsForIdleCpus(copy_threads_),
              std::forward<Fn>(fn));
}
KvStore::~KvStore() { Close(); }

Result<std::unique_ptr<KvStore>> KvStore::Open(const KvStoreOptions& options) {
  if (options.pool_path.empty() && options.store_path.empty()) {
    return InvalidArgument("KVStore needs a pool path, a store path, or both");
  }
  if (options.name_space.empty()) {
    return InvalidArgument("namespace must not be empty");
  }
  if (options.copy_threads > 256) {
    return InvalidArgument("copy_threads = " + std::to_string(options.copy_threads) +
                           ": at most 256");
  }
  std::unique_ptr<KvStore> s(new KvStore(options));
  if (!options.pool_path.empty()) {
    pool::Geometry g;
    g.region_bytes = options.pool_bytes;
    auto p = pool::Pool::OpenOrCreate(options.pool_path, g);
    if (!p.ok()) {
      return p.status().WithContext("pool '" + options.pool_path + "'");
    }
    s->pool_ = std::move(*p);
  }
  if (!options.store_path.empty()) {
    storage::StoreOptions so;
    so.root = options.store_path;
    so.model_fingerprint = kv::NamespaceFingerprint(options.name_space);
    so.capacity_bytes = options.store_capacity_bytes;
    so.sync = options.sync;
    auto st = storage::BlockStore::Open(so);
    if (!st.ok()) {
      return st.status().WithContext("store '" + options.store_path + "'");
    }
    s->store_ = std::move(*st);
  }
  return s;
}

Status KvStore::CheckOpen() const {
  if (closed_.load(std::memory_order_acquire)) {
    return Status(Code::kStorageClosed, "KVStore is closed");
  }
  return Status::Ok();
}

std::vector<Status> KvStore::PutBatch(std::span<const kv::BlockHash> keys,
                                      std::span<const ConstBuf> bufs) {
  DUALPATH_CHECK(keys.size() == bufs.size(), "PutBatch: keys and buffers differ in length");
  std::shared_lock lock(close_mu_);
  std::vector<Status> out(keys.size());
  if (Status s = CheckOpen(); !s.ok()) {
    std::fill(out.begin(), out.end(), s);
    return out;
  }
  if (pool_) {
    uint64_t bytes = 0;
    for (const ConstBuf& b : bufs) {
      bytes += b.size;
    }
    ForEachParallel(keys.size(), bytes, [&](size_t i) {
      Status s = PutToPool(keys[i], bufs[i]);
      if (!s.ok() && s.code() != Code::kAlreadyExists) {
        out[i] = s.WithContext("pool");
      }
    });
  }
  if (store_) {
    // Encode and write in rounds so staging memory stays bounded; blocks already on the file
    // system are skipped (another process, or an earlier put, published them).
    std::vector<storage::EncodedBlock> round;
    std::vector<size_t> index;
    uint64_t staged = 0;
    auto flush = [&] {
      std::vector<Status> st = store_->WriteBatch(round);
      for (size_t j = 0; j < st.size(); ++j) {
        if (!st[j].ok()) {
          out[index[j]] = st[j].WithContext("store");
        }
      }
      round.clear();
      index.clear();
      staged = 0;
    };
    for (size_t i = 0; i < keys.size(); ++i) {
      if (store_->Contains(keys[i])) {
        continue;
      }
      const std::span<const std::byte> payload(bufs[i].data, bufs[i].size);
      auto enc = store_->Encode(keys[i], ValueShape(payload.size()), payload);
      if (!enc.ok()) {
        out[i] = enc.status().WithContext("store");
        continue;
      }
      staged += enc->file_bytes;
      round.push_back(std::move(*enc));
      index.push_back(i);
      if (staged >= kStageBytesPerRound) {
        flush();
      }
    }
    if (!round.empty()) {
      flush();
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out[i].ok()) {
      counters_.puts.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_put.fetch_add(bufs[i].size, std::memory_order_relaxed);
    } else {
      counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return out;
}

Status KvStore::PutToPool(const kv::BlockHash& key, ConstBuf buf) {
  ASSIGN_OR_RETURN(pool::WriteHandle w, pool_->Reserve(key, buf.size));
  // One pass over the payload (issue 27): the copy into the pool computes the checksum, bound to
  // the key (kv::KeySeed) so that an index entry pointing this key at another key's block, with
  // that block's checksum, fails the check on read. Published with it as the entry's tag.
  const uint64_t sum = kv::CopyAndChecksum(buf.data, w.data, buf.size, PoolSeed(key));
  return pool_->Publish(w, sum);
}

Result<uint64_t> KvStore::GetFromPool(const kv::BlockHash& key, MutBuf buf) {
  auto pin = pool_->Pin(key);
  if (!pin.ok()) {
    if (pin.status().code() == Code::kNotFound) {
      return Miss(key, "not in the pool");
    }
    return pin.status().WithContext("pool");
  }
  const uint64_t size = pin->size;
  if (size > buf.size) {
    (void)pool_->Unpin(*pin);
    return OutOfRange("block " + key.Hex().substr(0, 16) + " has " + std::to_string(size) +
                      " bytes, more than the buffer's " + std::to_string(buf.size));
  }
  const uint64_t sum = kv::CopyAndChecksum(pin->data, buf.data, size, PoolSeed(key));
  const uint64_t want = pin->user_tag;
  (void)pool_->Unpin(*pin);
  if (sum != want) {
    counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
    (void)pool_->Delete(key);  // a pinned block stays until its readers let go; still a miss
    return Miss(key, "pool copy failed its checksum (dropped)");
  }
  return size;
}

std::vector<Result<uint64_t>> KvStore::GetBatch(std::span<const kv::BlockHash> keys,
                                                std::span<const MutBuf> bufs) {
  DUALPATH_CHECK(keys.size() == bufs.size(), "GetBatch: keys and buffers differ in length");
  std::shared_lock lock(close_mu_);
  std::vector<Result<uint64_t>> out(keys.size(), Result<uint64_t>(Miss({}, "")));
  if (Status s = CheckOpen(); !s.ok()) {
    std::fill(out.begin(), out.end(), Result<uint64_t>(s));
    return out;
  }
  counters_.gets.fetch_add(keys.size(), std::memory_order_relaxed);
  if (pool_) {
    uint64_t bytes = 0;
    for (const MutBuf& b : bufs) {
      bytes += b.size;
    }
    ForEachParallel(keys.size(), bytes, [&](size_t i) {
      out[i] = GetFromPool(keys[i], bufs[i]);
      if (out[i].ok()) {
        counters_.pool_hits.fetch_add(1, std::memory_order_relaxed);
        counters_.bytes_got.fetch_add(*out[i], std::memory_order_relaxed);
      }
    });
  }
  std::vector<size_t> todo;  // keys for the persistent tier
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!pool_) {
      out[i] = Miss(keys[i], "no such block");
    } else if (out[i].ok() || out[i].status().code() != Code::kStorageMiss) {
      continue;  // a hit, or a too-small buffer or a pool error: the persistent tier won't help
    }
    if (store_) {
      todo.push_back(i);
    }
  }
  // Persistent tier: read into aligned staging buffers (block file = header + payload), copy the
  // verified payload out, and promote it into the pool.
  for (size_t begin = 0; begin < todo.size();) {
    std::vector<storage::AlignedBuffer> staging;
    std::vector<storage::ReadRequest> reqs;
    uint64_t staged = 0;
    size_t end = begin;
    while (end < todo.size() && (end == begin || staged < kStageBytesPerRound)) {
      const size_t i = todo[end];
      const uint64_t file_bytes = kv::BlockFileSize(bufs[i].size);
      staging.emplace_back(file_bytes);
      reqs.push_back(storage::ReadRequest{keys[i], staging.back().span().first(file_bytes), 1});
      staged += file_bytes;
      ++end;
    }
    std::vector<storage::ReadResult> res = store_->ReadBatch(reqs);
    for (size_t j = 0; j < res.size(); ++j) {
      const size_t i = todo[begin + j];
      if (res[j].status.ok()) {
        const auto payload = res[j].block.payload;
        if (payload.size() > bufs[i].size) {
          out[i] = OutOfRange("block " + keys[i].Hex().substr(0, 16) + " has " +
                              std::to_string(payload.size()) + " bytes, more than the buffer's " +
                              std::to_string(bufs[i].size));
          continue;
        }
        // The file's checksum was verified by the read; the copy computes the pool's checksum in
        // the same pass, so promotion does not read the payload once more.
        const uint64_t sum =
            kv::CopyAndChecksum(payload.data(), bufs[i].data, payload.size(), PoolSeed(keys[i]));
        out[i] = static_cast<uint64_t>(payload.size());
        counters_.store_hits.fetch_add(1, std::memory_order_relaxed);
        counters_.bytes_got.fetch_add(payload.size(), std::memory_order_relaxed);
        if (pool_) {
          // Best effort: a full pool or a concurrent writer of the same block is fine.
          (void)pool_->Put(keys[i], payload, sum);
        }
      } else if (res[j].status.code() == Code::kInvalidArgument) {
        // The file does not fit the staging buffer sized from the caller's buffer.
        out[i] =
            OutOfRange("block " + keys[i].Hex().substr(0, 16) + " is larger than the buffer's " +
                       std::to_string(bufs[i].size) + " bytes");
      } else {
        out[i] = res[j].status;
      }
    }
    begin = end;
  }
  for (auto& r : out) {
    if (!r.ok() && r.status().code() == Code::kStorageMiss) {
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return out;
}

Result<size_t> KvStore::LeadingHits(std::span<const kv::BlockHash> keys) {
  std::shared_lock lock(close_mu_);
  RETURN_IF_ERROR(CheckOpen());
  size_t n = pool_ ? pool_->LongestPrefix(keys) : 0;
  if (store_) {
    while (n < keys.size() && store_->Contains(keys[n])) {
      ++n;
    }
  }
  return n;
}

Result<std::vector<bool>> KvStore::Exists(std::span<const kv::BlockHash> keys) {
  std::shared_lock lock(close_mu_);
  RETURN_IF_ERROR(CheckOpen());
  std::vector<bool> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    out[i] = (pool_ && pool_->Contains(keys[i])) || (store_ && store_->Contains(keys[i]));
  }
  return out;
}

Status KvStore::Remove(const kv::BlockHash& key) {
  std::shared_lock lock(close_mu_);
  RETURN_IF_ERROR(CheckOpen());
  const bool in_pool = pool_ && pool_->Contains(key);
  const bool in_store = store_ && store_->Contains(key);
  if (!in_pool && !in_store) {
    return NotFound("no block " + key.Hex());
  }
  if (in_pool) {
    Status s = pool_->Delete(key);
    if (!s.ok() && s.code() != Code::kNotFound) {
      return s.WithContext("pool");
    }
  }
  if (in_store) {
    RETURN_IF_ERROR(store_->Remove(key).WithContext("store"));
  }
  counters_.removes.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status KvStore::RegisterBuffer(uintptr_t addr, uint64_t size) {
  if (addr == 0 || size == 0) {
    return InvalidArgument("register_buffer: address and size must be non-zero");
  }
  if (addr + size < addr) {
    return InvalidArgument("register_buffer: range wraps around the address space");
  }
  std::lock_guard lock(reg_mu_);
  auto next = registered_.lower_bound(addr);
  if (next != registered_.end() && next->first < addr + size) {
    return InvalidArgument("register_buffer: range overlaps a registered buffer");
  }
  if (next != registered_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > addr) {
      return InvalidArgument("register_buffer: range overlaps a registered buffer");
    }
  }
  registered_.emplace(addr, size);
  return Status::Ok();
}

Status KvStore::UnregisterBuffer(uintptr_t addr) {
  std::lock_guard lock(reg_mu_);
  if (registered_.erase(addr) == 0) {
    return NotFound("unregister_buffer: no buffer registered at this address");
  }
  return Status::Ok();
}

Status KvStore::CheckRegistered(uintptr_t addr, uint64_t size) const {
  std::lock_guard lock(reg_mu_);
  auto it = registered_.upper_bound(addr);
  if (it != registered_.begin()) {
    --it;
    if (addr >= it->first && size <= it->second && addr - it->first <= it->second - size) {
      return Status::Ok();
    }
  }
  return InvalidArgument("range [0x" + fmt::format("{:x}", addr) + ", +" + std::to_string(size) +
                         ") is not inside a registered buffer (register_buffer first)");
}

Result<KvStoreStats> KvStore::Stats() {
  std::shared_lock lock(close_mu_);
  RETURN_IF_ERROR(CheckOpen());
  KvStoreStats s;
  s.puts = counters_.puts.load();
  s.put_errors = counters_.put_errors.load();
  s.gets = counters_.gets.load();
  s.pool_hits = counters_.pool_hits.load();
  s.store_hits = counters_.store_hits.load();
  s.misses = counters_.misses.load();
  s.corrupt = counters_.corrupt.load();
  s.bytes_put = counters_.bytes_put.load();
  s.bytes_got = counters_.bytes_got.load();
  s.removes = counters_.removes.load();
  if (pool_) {
    s.has_pool = true;
    s.pool = pool_->Stats();
    if (!s.pool.lock_error.empty()) return Status(Code::kTimeout, s.pool.lock_error);
  }
  if (store_) {
    s.has_store = true;
    s.store = store_->stats();
    s.corrupt += s.store.corrupt;
  }
  return s;
}

void KvStore::Close() {
  std::unique_lock lock(close_mu_);
  closed_.store(true, std::memory_order_release);
  pool_.reset();
  store_.reset();
}

}  // namespace dualpath::python
