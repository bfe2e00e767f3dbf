// HitReader: reads a run of hit blocks from the node's BlockStore and scatters each verified Full
// Block into a per-layer KV area (the PE receive area or the DE buffer).
//
// A Full Block is [layers][block_tokens][bpt] (kv/layout.h); the areas are [layers][T][bpt] with
// `layer_stride` bytes between layers, so block b's layer l goes to
// area + l * layer_stride + (b * block_tokens) * bpt: one memcpy per (block, layer). Blocks stream
// through ReadStream with a small pool of aligned staging buffers (3 x read depth, the bound
// BlockStore documents), so any number of blocks reads in constant staging memory.
//
// Only verified bytes are copied: a block whose read is not OK (missing, corrupt, I/O error) is
// never copied, and the result's `loaded_blocks` is the length of the verified prefix (the caller
// recomputes that block and everything after it).
//
// With a KvStoreLink (the distributed KV store, `engine --kv-store-etcd`), the blocks the node's
// own tier did not have are asked of the store, from the first failed block on, a staging pool's
// worth at a time: each object is a block file and is verified exactly as a file read
// (kv::DecodeBlockFile against the store's model fingerprint and the block's hash); one that does
// not verify is a miss. The verified prefix then runs over both sources.
//
// With a RackLink (the rack-wide prefix cache, `--kv-substrate rack-pool`, rack_link.h), every
// block is first looked up in the rack pool's prefix index under the same hash: a hit is the
// block file storage would have returned, verified the same way (kv::DecodeBlockFile), so only
// the blocks the rack lacks (or holds damaged) are read from the node's tier. A block read from
// the tier is published into the rack (read-through), so the next reader in the rack finds it.
//
// Thread safety: one Read at a time per HitReader (the staging pool is per reader); the store may
// be shared.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "dualpath/kv/block_hash.h"
#include "dualpath/kv/layout.h"
#include "dualpath/storage/aligned_buffer.h"
#include "dualpath/storage/block_store.h"
#include "engine/kv_store_link.h"
#include "engine/rack_link.h"

namespace dualpath::engine {

struct HitReadResult {
  uint64_t loaded_blocks = 0;  // verified prefix
  uint64_t bytes_read = 0;     // file bytes of verified blocks read from the node's own tier
  uint64_t rack_blocks = 0;    // blocks of the prefix read from the rack prefix cache
  uint64_t store_local = 0;    // blocks of the prefix read from the store, same node
  uint64_t store_remote = 0;   // blocks of the prefix read from the store, another node
  Status first_error;          // why block `loaded_blocks` failed (OK if all loaded)
};

class HitReader {
 public:
  // kv_store: the distributed KV store; rack: the rack prefix cache (neither owned; each may be
  // null: not used).
  HitReader(storage::BlockStore& store, const kv::BlockShape& shape, unsigned depth,
            KvStoreLink* kv_store = nullptr, RackLink* rack = nullptr);

  // Reads blocks named by `hashes` (block i of the run is the area's block first_block + i).
  HitReadResult Read(std::span<const kv::BlockHash> hashes, uint64_t first_block, std::byte* area,
                     uint64_t layer_stride);

 private:
  // Every block of the run from the rack prefix cache; status[i] OK for those it had (verified and
  // scattered), kNotFound or the verification error for the others.
  void ReadFromRack(std::span<const kv::BlockHash> hashes, uint64_t first_block, std::byte* area,
                    uint64_t layer_stride, std::vector<Status>& status);
  // Blocks [from, n) that the tier left failed, from the store; updates status/source.
  void ReadFromStore(std::span<const kv::BlockHash> hashes, uint64_t first_block, std::byte* area,
                     uint64_t layer_stride, size_t from, std::vector<Status>& status,
                     std::vector<StoreHit>& source);
  // Copies a verified payload's layers into the area (block index first_block + i).
  void Scatter(std::span<const std::byte> payload, uint64_t block, std::byte* area,
               uint64_t layer_stride) const;

  storage::BlockStore& store_;
  KvStoreLink* const kv_store_;
  RackLink* const rack_;
  const kv::BlockShape shape_;
  std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<storage::AlignedBuffer> buffers_;
  std::vector<size_t> free_;  // indices into buffers_; guarded by mu_
};

}  // namespace dualpath::engine
