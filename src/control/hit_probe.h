// HitProbe: finds how much of a prompt's KV is already in storage (docs/e2e.md, request flow 1).
// Hashes the prompt's full blocks with the run's kv::BlockHasher and asks the block store, block
// by block from the first, whether a file exists under the hash (BlockStore::Contains: metadata
// only, no read, not verified; an engine that finds a block corrupt recomputes it). The hit is
// the longest present prefix, capped at prompt - 1 so at least one token is computed.
//
// The store is opened without scanning (the service never writes, evicts or cleans up another
// process's temporary files).
//
// Thread safety: HitTokens may be called from any thread concurrently (BlockStore::Contains and
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

class HitProbe {
 public:
  // Opens (creating if needed) <root>/<fingerprint of model>/ for probing.
  static Result<std::unique_ptr<HitProbe>> Open(const std::string& root,
                                                const kv::ModelGeometry& model, kv::HashAlgo algo,
                                                const std::string& seed, uint32_t block_tokens);

  // Longest stored prefix of `prompt`, in tokens, capped at prompt.size() - 1 (0 for an empty
  // prompt). Token ids must have been validated (<= kv::kMaxTokenId).
  int64_t HitTokens(std::span<const uint32_t> prompt);

 private:
  HitProbe(std::unique_ptr<storage::BlockStore> store, kv::BlockHasher hasher);
  std::unique_ptr<storage::BlockStore> store_;
  kv::BlockHasher hasher_;
};

}  // namespace dualpath::control
