// RackLink: the rack pool as the prefill->decode KV substrate (issue 29, TraCT §3-§4;
// docs/engine.md "KV substrate", docs/pool.md "Rack mode").
//
// With `--kv-substrate rack-pool` the engines of a cluster attach to one pool region that every
// node maps (`--rack-pool PATH --rack-node N`; on the testbed a file every network namespace
// sees, on real hardware a DAX device). A layer's KV that would have been put over the compute
// link goes through the region instead:
//
//   producer: Reserve (entry WRITING, invisible) -> copy the token ranges in (non-temporal
//             stores, checksumming in the same pass) -> Publish with the checksum (the READY flip
//             is the visibility boundary; in the non-coherent model the payload is written back
//             before it) -> Pin (so LRU eviction never takes it before the consumer read it) ->
//             a notice over the compute link that carries only the object's name (no payload).
//   consumer: Pin (invalidates the payload's cache lines first in the non-coherent model) ->
//             copy out, checksumming -> Unpin. A checksum or size that differs is kCorruption: the
//             request fails (and is re-submitted), never wrong KV to the model.
//   producer, once the consumer said it has the object (PrefillDone / the PE's compute): Unpin
//             and Delete. A producer that dies leaves its objects unpinned (the pool's recovery
//             sweep drops its pins) and LRU evicts them: nothing leaks.
//
// An object is named by RackObjectId, which both sides know from the request protocol (request
// id, attempt, the PE's xfer id, the DE's for PE->DE objects, layer, direction), so the notice's
// tag (xfer id + layer) is the object's id.
//
// The same region is also the rack-wide prefix cache (TraCT §4.2, docs/pool.md "Rack prefix
// cache"): full KV blocks live in the pool's prefix index under their storage key, the block hash
// of the request's chain, and their payload is the block file storage holds (kv::EncodeBlockFile
// bytes: header with the model fingerprint, the hash and the payload checksum). So a rack hit is
// byte for byte a storage hit, and it is verified exactly as a file read is
// (kv::DecodeBlockFile: size, fingerprint, hash, checksum); anything that fails is a miss, read
// from storage or recomputed. Blocks are published whole (Pool::Put: the READY flip is the
// visibility boundary; non-coherent: written back first), read pinned (non-coherent: invalidated
// first) and evicted by the pool's LRU when space runs out (never while pinned).
//
// Thread safety: every method may be called from any thread (the pool is thread-safe; the pins
// this process holds are guarded by mu_).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"
#include "dualpath/pool/pool.h"

namespace dualpath::engine {

// Which way an object goes: PE -> DE (the KV the DE lacks) or DE -> PE (DE-path hit KV).
enum class RackDirection : uint8_t { kToDecode = 1, kToPrefill = 2 };

struct RackObjectId {
  RackDirection direction = RackDirection::kToDecode;
  uint64_t request_id = 0;
  uint32_t attempt = 0;
  uint32_t pe_xfer_id = 0;
  uint32_t de_xfer_id = 0;
  uint32_t layer = 0;
  // The pool key: a fixed tag ("rackkv01") then the fields, so it never equals a block hash of
  // KV content (those are SHA-256 / keyed hashes of tokens) and two live requests never share one.
  kv::BlockHash Key() const;
};

// A contiguous range of an engine buffer that an object holds a piece of (in object order).
struct RackRange {
  std::byte* data = nullptr;
  uint64_t bytes = 0;
};

struct RackLinkStats {
  uint64_t written_bytes = 0;  // payload bytes published into the region
  uint64_t read_bytes = 0;     // payload bytes read out of it (verified)
  uint64_t objects_written = 0;
  uint64_t objects_read = 0;
  uint64_t errors = 0;  // writes or reads that failed (pool full, timeout, corruption, ...)
  // The rack prefix cache (block files under their block hash):
  uint64_t prefix_hits = 0;            // blocks found and verified
  uint64_t prefix_misses = 0;          // blocks looked up and absent (never published, or evicted)
  uint64_t prefix_corrupt = 0;         // blocks found that failed verification (a miss too)
  uint64_t prefix_bytes = 0;           // block file bytes of the hits
  uint64_t prefix_published = 0;       // blocks this engine published
  uint64_t prefix_publish_errors = 0;  // publishes that failed (pool full of pinned objects, ...)
};

class RackLink {
 public:
  // Attaches to the rack region at `path` as node `node` (it must exist: the cluster creates it).
  // `lock_timeout` 0: the region's default (3 x its lease).
  static Result<std::unique_ptr<RackLink>> Open(const std::string& path, uint32_t node,
                                                Nanos lock_timeout = 0);
  ~RackLink();
  RackLink(const RackLink&) = delete;
  RackLink& operator=(const RackLink&) = delete;

  // Producer: publishes the concatenation of `src` as object `id`, pinned until Release(id).
  // A stale object of the same name (left by a dead attempt) is deleted first.
  Status Write(const RackObjectId& id, std::span<const RackRange> src);
  // Consumer: copies object `id` into `dst` (its size must be the sum of theirs) and verifies it.
  Status Read(const RackObjectId& id, std::span<const RackRange> dst);
  // Producer: unpins and deletes object `id` (a no-op if this process never wrote it). A consumer
  // that still pins it keeps it; it is then an unpinned cache entry LRU evicts.
  void Release(const RackObjectId& id);

  // --- the rack prefix cache ---
  // Publishes `file` (a whole block file, as storage writes it) under `hash`. A block already
  // there (another engine published it) is OK: same key, same bytes. Space comes from the LRU.
  Status PublishBlock(const kv::BlockHash& hash, std::span<const std::byte> file);
  // Looks `hash` up (lock-free: a miss costs no lock round trip), pins it and hands its bytes to
  // `use`, which verifies them and copies them out; unpins. Returns kNotFound for a miss and
  // `use`'s error for a block that failed verification (counted corrupt; this engine deletes it
  // when no one pins it, so a correct copy can be published again). Counts hits and bytes.
  Status ReadBlock(const kv::BlockHash& hash,
                   const std::function<Status(std::span<const std::byte>)>& use);

  RackLinkStats Stats() const;
  const std::string& path() const { return path_; }
  pool::MemoryModel model() const;

 private:
  RackLink(std::string path, std::unique_ptr<pool::Pool> pool);

  const std::string path_;
  std::unique_ptr<pool::Pool> pool_;
  mutable std::mutex mu_;
  std::map<kv::BlockHash, pool::PinnedBlock> pins_;  // guarded by mu_: objects this process wrote
  std::atomic<uint64_t> written_bytes_{0}, read_bytes_{0}, objects_written_{0}, objects_read_{0},
      errors_{0};
  std::atomic<uint64_t> prefix_hits_{0}, prefix_misses_{0}, prefix_corrupt_{0}, prefix_bytes_{0},
      prefix_published_{0}, prefix_publish_errors_{0};
};

}  // namespace dualpath::engine
