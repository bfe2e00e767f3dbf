#include "engine/kv_store_link.h"

#include <atomic>
#include <utility>

#include "dualpath/common/log.h"
#include "dualpath/store/client.h"

namespace dualpath::engine {
namespace {

class StoreLink final : public KvStoreLink {
 public:
  StoreLink(std::unique_ptr<store::StoreClient> client, uint64_t fingerprint)
      : client_(std::move(client)), fingerprint_(fingerprint) {}

  std::vector<StoreHit> Get(std::span<const kv::BlockHash> hashes,
                            std::span<const std::span<std::byte>> files) override {
    std::vector<StoreHit> out(hashes.size(), StoreHit::kMiss);
    std::vector<store::GetItem> items(hashes.size());
    for (size_t i = 0; i < hashes.size(); ++i) {
      items[i] = store::GetItem{store::ObjectKey{fingerprint_, hashes[i]}, files[i]};
    }
    Result<std::vector<store::ReadResult>> r = client_->GetInto(items);
    if (!r.ok()) {
      // The master could not be reached in time: every block is a miss (recomputed).
      log::Debug("engine: kv store get of {} blocks: {}", hashes.size(), r.status().ToString());
      misses_.fetch_add(hashes.size(), std::memory_order_relaxed);
      return out;
    }
    for (size_t i = 0; i < hashes.size() && i < r->size(); ++i) {
      const store::ReadResult& rr = (*r)[i];
      if (!rr.status.ok()) {
        misses_.fetch_add(1, std::memory_order_relaxed);
      } else if (rr.source == store::ReadSource::kLocal) {
        out[i] = StoreHit::kLocal;
        local_.fetch_add(1, std::memory_order_relaxed);
      } else {
        out[i] = StoreHit::kRemote;
        remote_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return out;
  }

  void Put(std::span<const storage::EncodedBlock> blocks,
           std::span<const Status> written) override {
    std::vector<store::PutItem> items;
    items.reserve(blocks.size());
    for (size_t i = 0; i < blocks.size() && i < written.size(); ++i) {
      if (!written[i].ok()) continue;
      const storage::EncodedBlock& b = blocks[i];
      items.push_back(store::PutItem{store::ObjectKey{fingerprint_, b.hash},
                                     std::span<const std::byte>(b.file.data(), b.file_bytes)});
    }
    if (items.empty()) return;
    Result<std::vector<Status>> r = client_->Put(items);
    if (!r.ok()) {
      log::Debug("engine: kv store put of {} blocks: {}", items.size(), r.status().ToString());
      puts_failed_.fetch_add(items.size(), std::memory_order_relaxed);
      return;
    }
    for (const Status& s : *r) {
      if (s.ok()) {
        puts_ok_.fetch_add(1, std::memory_order_relaxed);
      } else if (s.code() == Code::kStorePutPending) {
        // Two engines wrote the same block at once (a shared prefix): the other one stores it.
        puts_pending_.fetch_add(1, std::memory_order_relaxed);
      } else {
        if (puts_failed_.fetch_add(1, std::memory_order_relaxed) == 0) {
          log::Warn("engine: kv store put failed (first of its kind logged): {}", s.ToString());
        }
      }
    }
  }

  void OnRejected() override { rejected_.fetch_add(1, std::memory_order_relaxed); }

  KvStoreStats Stats() const override {
    KvStoreStats s;
    s.hits_local = local_.load(std::memory_order_relaxed);
    s.hits_remote = remote_.load(std::memory_order_relaxed);
    s.misses = misses_.load(std::memory_order_relaxed);
    s.rejected = rejected_.load(std::memory_order_relaxed);
    s.puts_ok = puts_ok_.load(std::memory_order_relaxed);
    s.puts_failed = puts_failed_.load(std::memory_order_relaxed);
    s.puts_pending = puts_pending_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::unique_ptr<store::StoreClient> client_;
  const uint64_t fingerprint_;
  std::atomic<uint64_t> local_{0}, remote_{0}, misses_{0}, rejected_{0}, puts_ok_{0},
      puts_failed_{0}, puts_pending_{0};
};

}  // namespace

Result<std::unique_ptr<KvStoreLink>> MakeStoreLink(const StoreLinkOptions& options) {
  store::ClientOptions o;
  o.cluster = options.cluster;
  o.etcd.endpoints = options.etcd;
  // One set of files towards etcd and the masters: in `cluster run --store` the engine's own
  // certificate of the run's PKI (docs/store.md "Security").
  o.etcd.tls = options.tls;
  o.master_tls = options.tls;
  o.local_node = NodeId(options.node_id);
  o.host = options.host;
  o.shm_dir = options.shm_dir;
  o.transfer.ucx_tls = options.ucx_tls;
  o.transfer.token = options.transfer_token;
  // A store that does not answer must not hold a request up for long: it is a cache. Its master
  // calls retry for 2 s at most; so long may a transfer to a node go without progress (the
  // transfer engine's default, 5 s, held a read of a node behind a dead link, and every read
  // behind it, for 5 s), and so long may a connect to one take.
  o.retry_deadline = 2 * kNanosPerSecond;
  o.transfer.peer_timeout = 2 * kNanosPerSecond;
  // The engine's transfer engines sleep between events, its peer engine as this one: polling
  // threads in every engine starve the store nodes they read from where they share a few cores
  // (the emulated cluster; the nodes there do not poll either, src/replay/run_store.cc).
  o.transfer_poll = false;
  o.skip_addr = options.skip_addr;
  ASSIGN_OR_RETURN(std::unique_ptr<store::StoreClient> client,
                   store::StoreClient::Create(std::move(o)));
  return std::unique_ptr<KvStoreLink>(new StoreLink(std::move(client), options.model_fingerprint));
}

}  // namespace dualpath::engine
