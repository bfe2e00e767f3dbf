#include "dualpath/store/client.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/common/log.h"
#include "dualpath/coord/membership.h"
#include "store/client_impl.h"
#include "store/node_proto.h"

namespace dualpath::store {

namespace {

constexpr Nanos kRetryBackoffMin = 50 * kNanosPerMilli;
constexpr Nanos kRetryBackoffMax = 1 * kNanosPerSecond;
// The shortest deadline a master call's try is given, however little of the call is left.
constexpr Nanos kMinTry = 100 * kNanosPerMilli;

Nanos Now() { return SteadyClock::Default().Now(); }

}  // namespace

bool RetryableMasterError(const Status& s) {
  switch (s.code()) {
    case Code::kUnavailable:
    case Code::kTimeout:
    case Code::kCoordNotLeader:
      return true;
    default:
      break;
  }
  // A standby answers FAILED_PRECONDITION; the dualpath code travels in the text (grpc_status.h).
  return s.message().find("kCoordNotLeader") != std::string::npos ||
         s.message().find("not the leader") != std::string::npos;
}

Result<std::pair<std::shared_ptr<v1::StoreMaster::Stub>, std::string>> StoreClient::Impl::Leader(
    bool refresh) {
  {
    std::lock_guard lock(leader_mu);
    if (!refresh && !leader_suspect && stub != nullptr) return std::make_pair(stub, leader_addr);
  }
  Count([](ClientStats& s) { ++s.leader_lookups; });
  ASSIGN_OR_RETURN(std::optional<coord::KeyValue> kv, observer->Leader());
  if (!kv.has_value() || kv->value.empty()) {
    return Unavailable(fmt::format("store cluster {}: no leader master in etcd ({})",
                                   options.cluster,
                                   coord::LeaderElection::LeaderKey(options.cluster)));
  }
  std::lock_guard lock(leader_mu);
  if (stub == nullptr || kv->value != leader_addr) {
    leader_addr = kv->value;
    stub = v1::StoreMaster::NewStub(MakeChannel(leader_addr, options.master_tls));
  }
  leader_suspect = false;
  return std::make_pair(stub, leader_addr);
}

Status StoreClient::Impl::CallMaster(std::string_view rpc, Nanos until, const RpcFn& fn) {
  Nanos backoff = kRetryBackoffMin;
  bool refresh = false;
  while (true) {
    Status s;
    auto leader = Leader(refresh);
    if (!leader.ok()) {
      s = leader.status().WithContext(fmt::format("store master {}", rpc));
    } else if (options.skip_addr && options.skip_addr(leader->second)) {
      // The caller knows the leader's host unreachable (partitioned). Etcd may already name a
      // successor: look once more; if it still names this one (its lease has not run out yet),
      // fail now: asking would only wait out the deadline, and so would every retry.
      if (!refresh) {
        refresh = true;
        continue;
      }
      MarkLeaderSuspect();
      return Unavailable(fmt::format("store master {} at {}: unreachable over the compute network",
                                     rpc, leader->second));
    } else {
      // No try outlasts the call: a leader that stopped answering must leave time to find its
      // successor within retry_deadline (a try of rpc_timeout alone used all of it and more).
      const Nanos left = std::max(until - Now(), kMinTry);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::nanoseconds(std::min(options.rpc_timeout, left)));
      s = FromGrpc(fn(leader->first.get(), &ctx),
                   fmt::format("store master {} at {}", rpc, leader->second));
    }
    if (s.ok() || !RetryableMasterError(s)) return s;
    if (Now() + backoff > until) {
      // Giving up on an error a leader change explains: the next call looks in etcd first
      // (before, it asked the same silent leader again, and each call waited out its deadline
      // until that leader answered again).
      MarkLeaderSuspect();
      return s;
    }
    Count([](ClientStats& st) { ++st.retries; });
    log::Debug("store client: {} (retrying in {} ms)", s.ToString(), backoff / kNanosPerMilli);
    // Backoff between tries of an unreachable or deposed master (not a synchronisation).
    std::this_thread::sleep_for(std::chrono::nanoseconds(backoff));
    backoff = std::min(backoff * 2, kRetryBackoffMax);
    refresh = true;
  }
}

void StoreClient::Impl::MarkLeaderSuspect() {
  std::lock_guard lock(leader_mu);
  leader_suspect = true;
}

void StoreClient::Impl::QueueUnpin(uint64_t pin) {
  {
    std::lock_guard lock(unpin_mu);
    unpin_queue.push_back(pin);
  }
  unpin_cv.notify_one();
}

void StoreClient::Impl::UnpinLoop() {
  std::unique_lock lock(unpin_mu);
  while (true) {
    unpin_cv.wait(lock, [&] { return unpin_stop || !unpin_queue.empty(); });
    if (unpin_queue.empty()) return;  // stopping, and drained
    const uint64_t pin = unpin_queue.front();
    unpin_queue.pop_front();
    // While the client lives, an unpin retries like any call; at destruction it is tried once.
    const Nanos until = unpin_stop ? Now() : Now() + options.retry_deadline;
    lock.unlock();
    v1::UnpinRequest req;
    req.set_pin_id(pin);
    v1::UnpinResponse resp;
    Status s =
        CallMaster("Unpin", until, [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
          return stub->Unpin(ctx, req, &resp);
        });
    // An unpin that did not arrive expires on the master after its pin_ttl.
    if (!s.ok()) log::Debug("store client: {}", s.ToString());
    Count([](ClientStats& st) { ++st.unpins; });
    lock.lock();
  }
}

void StoreClient::Impl::StopUnpinner() {
  {
    std::lock_guard lock(unpin_mu);
    unpin_stop = true;
  }
  unpin_cv.notify_all();
  if (unpinner.joinable()) unpinner.join();
}

StoreClient::StoreClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StoreClient::~StoreClient() {
  impl_->StopUnpinner();
  // Registrations go with the engine; the staging memory after it.
  impl_->engine.reset();
}

Result<std::unique_ptr<StoreClient>> StoreClient::Create(ClientOptions options) {
  RETURN_IF_ERROR(coord::CheckCoordName(options.cluster, "cluster", 64));
  if (options.rpc_timeout <= 0) return InvalidArgument("store client rpc_timeout must be > 0");
  if (options.retry_deadline < 0) {
    return InvalidArgument("store client retry_deadline must be >= 0");
  }
  if (options.replicas < 1 || options.replicas > static_cast<uint32_t>(kMaxReplicas)) {
    return InvalidArgument(
        fmt::format("store client replicas {} is outside 1..{}", options.replicas, kMaxReplicas));
  }
  if (options.local_shm && options.shm_dir.empty()) {
    return InvalidArgument("store client shm_dir is empty (same-host tier files live there)");
  }
  if (options.host.empty()) {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) == 0) options.host = buf;
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  ASSIGN_OR_RETURN(impl->etcd, coord::EtcdClient::Connect(impl->options.etcd));
  ASSIGN_OR_RETURN(impl->observer,
                   coord::LeaderElection::Create(
                       impl->etcd.get(),
                       coord::ElectionOptions{impl->options.cluster, kNanosPerSecond, {}}, ""));
  ASSIGN_OR_RETURN(impl->engine, transfer::TransferEngine::Create(impl->options.transfer));
  Impl* raw = impl.get();
  raw->unpinner = std::thread([raw] { raw->UnpinLoop(); });
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(impl)));
}

Result<std::vector<Status>> StoreClient::Put(std::span<const PutItem> items) {
  if (items.empty()) return InvalidArgument("store put: empty batch");
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].bytes.empty()) {
      return InvalidArgument(
          fmt::format("store put: item {} ({}) has 0 bytes", i, items[i].key.ShortString()));
    }
  }
  std::lock_guard lock(impl_->batch_mu);
  // One master call per kMaxBatchKeys items (docs/store.md "Message limits").
  std::vector<Status> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); i += kMaxBatchKeys) {
    ASSIGN_OR_RETURN(std::vector<Status> part,
                     impl_->PutLocked(items.subspan(i, std::min(kMaxBatchKeys, items.size() - i))));
    std::move(part.begin(), part.end(), std::back_inserter(out));
  }
  return out;
}

Result<std::vector<ReadResult>> StoreClient::GetInto(std::span<const GetItem> items) {
  if (items.empty()) return InvalidArgument("store get: empty batch");
  std::lock_guard lock(impl_->batch_mu);
  std::vector<ReadResult> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); i += kMaxBatchKeys) {
    ASSIGN_OR_RETURN(std::vector<ReadResult> part,
                     impl_->GetLocked(items.subspan(i, std::min(kMaxBatchKeys, items.size() - i))));
    std::move(part.begin(), part.end(), std::back_inserter(out));
  }
  return out;
}

Result<ExistsReply> StoreClient::Exists(uint64_t model_fingerprint,
                                        std::span<const kv::BlockHash> hashes) {
  if (hashes.empty()) return InvalidArgument("store exists: no keys");
  ExistsReply out;
  out.found.reserve(hashes.size());
  for (size_t i = 0; i < hashes.size(); i += kMaxBatchKeys) {
    const std::span<const kv::BlockHash> part =
        hashes.subspan(i, std::min(kMaxBatchKeys, hashes.size() - i));
    v1::ExistsRequest req;
    req.set_model_fingerprint(model_fingerprint);
    std::string* packed = req.mutable_hashes();
    packed->reserve(part.size() * sizeof(kv::BlockHash::bytes));
    for (const kv::BlockHash& h : part) {
      packed->append(reinterpret_cast<const char*>(h.bytes.data()), h.bytes.size());
    }
    v1::ExistsResponse resp;
    RETURN_IF_ERROR(impl_->CallMaster("Exists", Now() + impl_->options.retry_deadline,
                                      [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
                                        return stub->Exists(ctx, req, &resp);
                                      }));
    if (resp.found().size() != part.size()) {
      return Internal(fmt::format("store master Exists answered {} flags for {} keys",
                                  resp.found().size(), part.size()));
    }
    for (char c : resp.found()) out.found.push_back(c != 0);
  }
  // The leading hits of the whole batch (each call's answer counts only its own part).
  while (out.prefix_hits < out.found.size() && out.found[out.prefix_hits]) ++out.prefix_hits;
  return out;
}

Result<LeaderStatsReply> StoreClient::LeaderStats() {
  v1::StatsRequest req;
  v1::StatsResponse resp;
  RETURN_IF_ERROR(impl_->CallMaster("Stats", Now() + impl_->options.retry_deadline,
                                    [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
                                      return stub->Stats(ctx, req, &resp);
                                    }));
  LeaderStatsReply out;
  out.leader_id = resp.leader_id();
  out.nodes = resp.nodes();
  out.objects = resp.objects();
  out.pending_puts = resp.pending_puts();
  out.evicted_replicas = resp.evicted_replicas();
  for (const v1::NodeUsage& u : resp.usage()) {
    out.usage.push_back(
        LeaderNodeUsage{NodeId(u.node()), u.dram_capacity(), u.dram_used(), u.dram_replicas()});
  }
  return out;
}

Result<uint64_t> StoreClient::Remove(std::span<const ObjectKey> keys) {
  if (keys.empty()) return InvalidArgument("store remove: no keys");
  uint64_t removed = 0;
  for (size_t i = 0; i < keys.size(); i += kMaxBatchKeys) {
    v1::RemoveRequest req;
    for (const ObjectKey& k : keys.subspan(i, std::min(kMaxBatchKeys, keys.size() - i))) {
      KeyToProto(k, req.add_keys());
    }
    v1::RemoveResponse resp;
    RETURN_IF_ERROR(impl_->CallMaster("Remove", Now() + impl_->options.retry_deadline,
                                      [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
                                        return stub->Remove(ctx, req, &resp);
                                      }));
    removed += resp.removed();
  }
  return removed;
}

Status StoreClient::RegisterBuffer(void* addr, uint64_t length) {
  if (addr == nullptr || length == 0) {
    return InvalidArgument("store client RegisterBuffer: null or empty buffer");
  }
  ASSIGN_OR_RETURN(transfer::RegionId id, impl_->engine->RegisterRegion(addr, length));
  std::lock_guard lock(impl_->buffers_mu);
  impl_->buffers[reinterpret_cast<uint64_t>(addr)] = {length, id};
  return Status::Ok();
}

Status StoreClient::UnregisterBuffer(void* addr) {
  transfer::RegionId id;
  {
    std::lock_guard lock(impl_->buffers_mu);
    auto it = impl_->buffers.find(reinterpret_cast<uint64_t>(addr));
    if (it == impl_->buffers.end()) {
      return NotFound(fmt::format("store client UnregisterBuffer: {} is not registered", addr));
    }
    id = it->second.second;
    impl_->buffers.erase(it);
  }
  return impl_->engine->DeregisterRegion(id);
}

ClientStats StoreClient::Stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->stats;
}

std::string StoreClient::leader() const {
  std::lock_guard lock(impl_->leader_mu);
  return impl_->leader_addr;
}

}  // namespace dualpath::store
