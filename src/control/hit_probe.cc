#include "control/hit_probe.h"

#include <type_traits>
#include <utility>
#include <vector>

#include "dualpath/kv/block_file.h"

namespace dualpath::control {

static_assert(sizeof(kv::BlockHash) == 32 && std::is_trivially_copyable_v<kv::BlockHash>,
              "prompt_block_hashes packs BlockHashes as 32-byte rows");

HitProbe::HitProbe(std::unique_ptr<storage::BlockStore> store, kv::BlockHasher hasher)
    : store_(std::move(store)), hasher_(std::move(hasher)) {}

Result<std::unique_ptr<HitProbe>> HitProbe::Open(const std::string& root,
                                                 const kv::ModelGeometry& model, kv::HashAlgo algo,
                                                 const std::string& seed, uint32_t block_tokens) {
  ASSIGN_OR_RETURN(kv::BlockHasher hasher, kv::BlockHasher::Create(algo, seed, block_tokens));
  if (root.empty()) {
    return std::unique_ptr<HitProbe>(new HitProbe(nullptr, std::move(hasher)));
  }
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

PromptProbe HitProbe::Probe(std::span<const uint32_t> prompt) const {
  PromptProbe out;
  if (prompt.empty()) return out;
  // The whole chain, not just up to the first miss: the engines need every prompt block's name
  // (to read hits and to write the rest behind), and this is the request's only hash pass.
  std::vector<kv::BlockHash> hashes;
  hasher_.HashBlocks(prompt, &hashes);
  out.block_hashes.assign(reinterpret_cast<const char*>(hashes.data()),
                          hashes.size() * sizeof(kv::BlockHash));
  int64_t hit = 0;
  if (store_ != nullptr) {
    for (const kv::BlockHash& h : hashes) {
      if (!store_->Contains(h)) break;
      hit += hasher_.block_size();
    }
  }
  const int64_t cap = static_cast<int64_t>(prompt.size()) - 1;
  out.hit_tokens = hit < cap ? hit : cap;
  return out;
}

}  // namespace dualpath::control
