#include "control/hit_probe.h"

#include <type_traits>
#include <utility>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/store/client.h"

namespace dualpath::control {

static_assert(sizeof(kv::BlockHash) == 32 && std::is_trivially_copyable_v<kv::BlockHash>,
              "prompt_block_hashes packs BlockHashes as 32-byte rows");

HitProbe::HitProbe(kv::BlockHasher hasher) : hasher_(std::move(hasher)) {}
HitProbe::~HitProbe() = default;

Result<std::unique_ptr<HitProbe>> HitProbe::Open(const std::string& root,
                                                 const kv::ModelGeometry& model, kv::HashAlgo algo,
                                                 const std::string& seed, uint32_t block_tokens) {
  std::vector<std::string> roots;
  if (!root.empty()) roots.push_back(root);
  return Open(roots, model, algo, seed, block_tokens, KvStoreProbeOptions{});
}

Result<std::unique_ptr<HitProbe>> HitProbe::Open(const std::vector<std::string>& roots,
                                                 const kv::ModelGeometry& model, kv::HashAlgo algo,
                                                 const std::string& seed, uint32_t block_tokens,
                                                 const KvStoreProbeOptions& kv_store,
                                                 const std::string& store_namespace) {
  ASSIGN_OR_RETURN(kv::BlockHasher hasher, kv::BlockHasher::Create(algo, seed, block_tokens));
  std::unique_ptr<HitProbe> probe(new HitProbe(std::move(hasher)));
  probe->fingerprint_ = store_namespace.empty() ? kv::ModelFingerprint(model)
                                                : kv::NamespaceFingerprint(store_namespace);
  for (const std::string& root : roots) {
    storage::StoreOptions opts;
    opts.root = root;
    opts.model_fingerprint = probe->fingerprint_;
    // Probing only: no index scan (and so no cleanup of other writers' temporary files), no
    // verification threads.
    opts.scan_on_open = false;
    opts.verify_threads = 0;
    opts.queue_depth = 1;
    auto store = storage::BlockStore::Open(opts);
    if (!store.ok()) return store.status().WithContext("control: open store for hit probing");
    probe->stores_.push_back(std::move(store).value());
  }
  if (!kv_store.etcd.empty()) {
    store::ClientOptions o;
    o.cluster = kv_store.cluster;
    o.etcd.endpoints = kv_store.etcd;
    o.etcd.tls = kv_store.tls;
    o.master_tls = kv_store.tls;
    o.local_shm = false;
    // A probe is on Submit's path: a store that does not answer is empty, quickly.
    o.retry_deadline = kNanosPerSecond;
    o.rpc_timeout = kNanosPerSecond;
    auto client = store::StoreClient::Create(std::move(o));
    if (!client.ok()) return client.status().WithContext("control: kv store client for probing");
    probe->kv_store_ = std::move(client).value();
  }
  return probe;
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
  std::vector<bool> in_kv_store;
  if (kv_store_ != nullptr && !hashes.empty()) {
    Result<store::ExistsReply> r = kv_store_->Exists(fingerprint_, hashes);
    if (r.ok()) {
      in_kv_store = std::move(r->found);
    } else {
      log::Warn("control: kv store exists for hit probing: {} (counted as no store hits)",
                r.status().ToString());
    }
  }
  int64_t hit = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    bool found = i < in_kv_store.size() && in_kv_store[i];
    for (size_t s = 0; !found && s < stores_.size(); ++s) found = stores_[s]->Contains(hashes[i]);
    if (!found) break;
    hit += hasher_.block_size();
  }
  const int64_t cap = static_cast<int64_t>(prompt.size()) - 1;
  out.hit_tokens = hit < cap ? hit : cap;
  return out;
}

}  // namespace dualpath::control
