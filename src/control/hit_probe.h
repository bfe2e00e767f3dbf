// HitProbe: the service's one pass over a prompt's blocks (docs/e2e.md, request flow 1). Hashes
// the prompt's full blocks with the run's kv::BlockHasher - the only time they are hashed: the
// chain travels to the engines in Assignment.prompt_block_hashes - and asks the block store,
// block by block from the first, whether a file exists under the hash (BlockStore::Contains:
// metadata only, no read, not verified; an engine that finds a block corrupt recomputes it). The
// hit is the longest present prefix, capped at prompt - 1 so at least one token is computed.
//
// The store is opened without scanning (the service never writes, evicts or cleans up another
// process's temporary files). Without a store (empty root) every hit is 0; the prompt is still
// hashed, since the engines name the blocks they write behind by the carried chain.
//
// Node-local tiers (`cluster run --local-tiers`): several roots, one per node; a block counts as
// stored when any of them holds it. That is an upper bound for the engine the request lands on:
// the engine reads its own tier only and recomputes from the first block it does not find
// (HitReader's verified prefix), so nothing fails and the loaded tokens tell the truth.
//
// With the distributed KV store (KvStoreProbeOptions), the probe also asks the leader master
// (StoreClient::Exists, one call per prompt) and a block counts as stored when the store or a
// root holds it: the engines read the store after their own tier. A store that does not answer
// counts as empty (a warning), never as an error.
//
// Thread safety: Probe may be called from any thread concurrently (BlockStore::Contains,
// BlockHasher and StoreClient are thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/kv/model.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::store {
class StoreClient;
}  // namespace dualpath::store

namespace dualpath::control {

// The distributed KV store the probe asks.
struct KvStoreProbeOptions {
  std::string etcd;     // etcd endpoints HOST:PORT[,...]; empty: no store
  std::string cluster;  // the store cluster's name
  GrpcTls tls;          // towards etcd and the masters (`cluster run --store`: the run's PKI)
};

// What the service learns about a prompt at Submit.
struct PromptProbe {
  // Every full block's hash, 32 bytes each, block 0 first: Assignment.prompt_block_hashes.
  std::string block_hashes;
  int64_t hit_tokens = 0;  // longest stored prefix, capped at prompt - 1
};

class HitProbe {
 public:
  // Opens (creating if needed) <root>/<fingerprint of model>/ for probing; an empty root opens
  // no store (hits are 0). kInvalidArgument for a block size the hasher refuses.
  static Result<std::unique_ptr<HitProbe>> Open(const std::string& root,
                                                const kv::ModelGeometry& model, kv::HashAlgo algo,
                                                const std::string& seed, uint32_t block_tokens);
  // Any number of roots (none: no file hits) and optionally the KV store. `store_namespace`
  // non-empty: the roots hold `dualpath.KVStore` tiers, probed in the namespace's directory
  // (kv::NamespaceFingerprint) instead of the model's (ServiceOptions::store_namespace).
  static Result<std::unique_ptr<HitProbe>> Open(const std::vector<std::string>& roots,
                                                const kv::ModelGeometry& model, kv::HashAlgo algo,
                                                const std::string& seed, uint32_t block_tokens,
                                                const KvStoreProbeOptions& kv_store,
                                                const std::string& store_namespace = "");
  ~HitProbe();

  // Hashes every full block of `prompt` and probes the longest stored prefix (hit_tokens is 0
  // for an empty prompt). Token ids must have been validated (<= kv::kMaxTokenId).
  PromptProbe Probe(std::span<const uint32_t> prompt) const;

  const kv::BlockHasher& hasher() const { return hasher_; }

 private:
  explicit HitProbe(kv::BlockHasher hasher);
  std::vector<std::unique_ptr<storage::BlockStore>> stores_;  // empty: no file hits
  std::unique_ptr<store::StoreClient> kv_store_;              // null: no KV store
  uint64_t fingerprint_ = 0;
  kv::BlockHasher hasher_;
};

}  // namespace dualpath::control
