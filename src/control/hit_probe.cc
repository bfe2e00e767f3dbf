#include "control/hit_probe.h"

#include <utility>
#include <vector>

#include "dualpath/kv/block_file.h"

namespace dualpath::control {

HitProbe::HitProbe(std::unique_ptr<storage::BlockStore> store, kv::BlockHasher hasher)
    : store_(std::move(store)), hasher_(std::move(hasher)) {}

Result<std::unique_ptr<HitProbe>> HitProbe::Open(const std::string& root,
                                                 const kv::ModelGeometry& model, kv::HashAlgo algo,
                                                 const std::string& seed, uint32_t block_tokens) {
  ASSIGN_OR_RETURN(kv::BlockHasher hasher, kv::BlockHasher::Create(algo, seed, block_tokens));
  storage::StoreOptions opts;
  opts.root = root;
  opts.model_fingerprint = kv::ModelFingerprint(model);
  // Probing only: no index scan (and so no cleanup of other writers' temporary files), no
  // verification threads.
  opts.scan_on_open = false;
  opts.verify_threads = 0;
  opts.queue_depth = 1;
  auto store = storage::BlockStore::Open(opts);
  if (!store.ok()) return store.status().WithContext("control: open store for hit probing");
  return std::unique_ptr<HitProbe>(new HitProbe(std::move(store).value(), std::move(hasher)));
}

int64_t HitProbe::HitTokens(std::span<const uint32_t> prompt) {
  if (prompt.empty()) return 0;
  const uint32_t bt = hasher_.block_size();
  // Hash and probe block by block: a prompt usually misses early or hits long, and stopping at the
  // first absent block avoids hashing the rest.
  kv::BlockHash parent = hasher_.none_hash();
  int64_t hit = 0;
  for (size_t start = 0; start + bt <= prompt.size(); start += bt) {
    parent = hasher_.HashBlock(parent, prompt.subspan(start, bt));
    if (!store_->Contains(parent)) break;
    hit += bt;
  }
  const int64_t cap = static_cast<int64_t>(prompt.size()) - 1;
  return hit < cap ? hit : cap;
}

}  // namespace dualpath::control
