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
// Thread safety: Probe may be called from any thread concurrently (BlockStore::Contains and
// BlockHasher are thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "dualpath/common/status.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/kv/model.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::control {

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

  // Hashes every full block of `prompt` and probes the longest stored prefix (hit_tokens is 0
  // for an empty prompt). Token ids must have been validated (<= kv::kMaxTokenId).
  PromptProbe Probe(std::span<const uint32_t> prompt) const;

  const kv::BlockHasher& hasher() const { return hasher_; }

 private:
  HitProbe(std::unique_ptr<storage::BlockStore> store, kv::BlockHasher hasher);
  std::unique_ptr<storage::BlockStore> store_;  // null: no store, no hits
  kv::BlockHasher hasher_;
};

}  // namespace dualpath::control
