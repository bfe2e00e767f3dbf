// KvStoreLink: an engine's path to the distributed KV store (issue 16, docs/store.md "In the
// system"): the second place a hit block is looked for, after the node's own persistent tier, and
// the second place every written block goes.
//
// Objects are block files: the bytes a BlockStore writes for the block (header + payload +
// padding, kv/block_file.h), keyed by (model fingerprint, block hash). A reader verifies what it
// gets exactly as it verifies a file read (kv::DecodeBlockFile: magic, version, fingerprint, hash,
// payload checksum), so a store object that is stale, foreign or corrupt is a miss and the block
// is recomputed: wrong KV never reaches the model. The store's own checksums (StoreClient) come on
// top of that.
//
// KvStoreLink is the interface HitReader and the write-behind use (a unit test can give a double);
// StoreLink (MakeStoreLink) is the real one over store::StoreClient.
//
// Thread safety: Get and Put may be called from any thread (StoreClient serializes batch calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::engine {

// Where a block read from the store came from.
enum class StoreHit : uint8_t { kMiss, kLocal, kRemote };

struct KvStoreStats {
  uint64_t hits_local = 0;   // objects read from the same node's DRAM tier (shm)
  uint64_t hits_remote = 0;  // objects read from another node's DRAM over the compute network
  uint64_t misses = 0;       // objects asked for and not read (absent, unreadable, too large)
  uint64_t rejected = 0;     // objects read that failed the engine's block-file verification
  uint64_t puts_ok = 0;      // written blocks stored (or already present)
  uint64_t puts_failed = 0;  // written blocks the store did not take
  // Written blocks whose key another writer was putting at that moment (kStorePutPending): not
  // a failure, since equal keys mean equal bytes; the block is there once that put commits.
  uint64_t puts_pending = 0;
};

class KvStoreLink {
 public:
  virtual ~KvStoreLink() = default;
  // Reads each block's file image into files[i] (at least the block's file bytes). Per block:
  // where it came from, or kMiss (files[i] then holds anything). Unverified: the caller checks.
  virtual std::vector<StoreHit> Get(std::span<const kv::BlockHash> hashes,
                                    std::span<const std::span<std::byte>> files) = 0;
  // Stores the blocks whose `written` status is OK (their file images); failures are counted,
  // never returned: the store is a cache, and the block is in the persistent tier already.
  virtual void Put(std::span<const storage::EncodedBlock> blocks,
                   std::span<const Status> written) = 0;
  // A verified-read failure of an object Get returned (counted).
  virtual void OnRejected() = 0;
  virtual KvStoreStats Stats() const = 0;
};

struct StoreLinkOptions {
  std::string etcd;      // etcd endpoints, HOST:PORT[,...]
  std::string cluster;   // the store cluster's name
  uint32_t node_id = 0;  // the store node beside this engine (preferred for puts); 0: none
  std::string host;      // this engine's host name as the store nodes advertise theirs
  std::string shm_dir = "/dev/shm";  // where same-host store nodes keep their tier files
  std::string ucx_tls = "tcp";
  std::string transfer_token;  // the cluster's transfer token (the store nodes hold the same)
  GrpcTls tls;                 // towards etcd and the masters (the engine's --kv-store-tls-*)
  uint64_t model_fingerprint = 0;
  // Store nodes and a leader master to skip as unreachable, by address (host:port;
  // store::ClientOptions::skip_addr): the engine's prober says which hosts it has let go of.
  // Empty: none.
  std::function<bool(const std::string& addr)> skip_addr;
};

// Connects lazily: creation fails only for bad options.
Result<std::unique_ptr<KvStoreLink>> MakeStoreLink(const StoreLinkOptions& options);

}  // namespace dualpath::engine
