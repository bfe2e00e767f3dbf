#include "dualpath/store/client.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
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
// Exists: the most calls one batch keeps in flight, and the fewest keys worth a call of their
// own (below it a part's fixed cost, ~100 us of gRPC on each side, outweighs its lookups).
constexpr uint32_t kMaxExistsInFlight = 64;
constexpr size_t kMinExistsPartKeys = 128;

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
      const grpc::Status g = fn(leader->first.get(), &ctx);
      // The context is formatted only for an error: an answered call costs no string.
      s = g.ok() ? Status::Ok()
                 : FromGrpc(g, fmt::format("store master {} at {}", rpc, leader->second));
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
  if (options.copy_threads > 256) {
    return InvalidArgument(
        fmt::format("store client copy_threads {} is outside 0..256", options.copy_threads));
  }
  if (options.exists_poll < 0 || options.exists_poll > kNanosPerSecond) {
    return InvalidArgument(
        fmt::format("store client exists_poll {} ns is outside 0..1 s", options.exists_poll));
  }
  RETURN_IF_ERROR(CheckTransferIdleSpin(options.transfer.busy_poll, options.transfer.idle_spin,
                                        "store client"));
  if (options.exists_in_flight < 1 || options.exists_in_flight > kMaxExistsInFlight) {
    return InvalidArgument(fmt::format("store client exists_in_flight {} is outside 1..{}",
                                       options.exists_in_flight, kMaxExistsInFlight));
  }
  if (options.copy_threads == 0) {
    options.copy_threads = std::min(std::max(1u, std::thread::hardware_concurrency()), 8u);
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

namespace {

v1::ExistsRequest ExistsRequestOf(uint64_t model_fingerprint,
                                  std::span<const kv::BlockHash> hashes) {
  v1::ExistsRequest req;
  req.set_model_fingerprint(model_fingerprint);
  req.set_bits(true);  // a bit per key in the answer (a master that predates it sends bytes)
  std::string* packed = req.mutable_hashes();
  packed->resize(hashes.size() * sizeof(kv::BlockHash::bytes));
  // kv::BlockHash is its 32 bytes and nothing else: the span is the packed field already.
  static_assert(sizeof(kv::BlockHash) == sizeof(kv::BlockHash::bytes));
  std::memcpy(packed->data(), hashes.data(), packed->size());
  return req;
}

// Copies one answer into found[first, first + count): its bits (found_bits, what this client
// asks for) or, from a master that predates them, its bytes (found); kInternal if it has not one
// flag per key.
Status TakeExistsAnswer(const ExistsPart& part, const v1::ExistsResponse& resp,
                        std::vector<bool>* found) {
  if (!resp.found_bits().empty() || resp.found().empty()) {
    if (resp.found_bits().size() != (part.count + 7) / 8) {
      return Internal(fmt::format("store master Exists answered {} bytes of bits for {} keys",
                                  resp.found_bits().size(), part.count));
    }
    for (size_t i = 0; i < part.count; ++i) {
      (*found)[part.first + i] = FoundBit(resp.found_bits(), i);
    }
    return Status::Ok();
  }
  if (resp.found().size() != part.count) {
    return Internal(fmt::format("store master Exists answered {} flags for {} keys",
                                resp.found().size(), part.count));
  }
  for (size_t i = 0; i < part.count; ++i) (*found)[part.first + i] = resp.found()[i] != 0;
  return Status::Ok();
}

// The next event of `cq`: polled for (a look that does not block, and that does gRPC's reads and
// writes on this thread) for up to `poll`, then waited for. Returns Next's answer.
bool NextPolling(grpc::CompletionQueue& cq, void** tag, bool* ok, Nanos poll) {
  if (poll > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(poll);
    do {
      switch (cq.AsyncNext(tag, ok, gpr_time_0(GPR_CLOCK_MONOTONIC))) {
        case grpc::CompletionQueue::GOT_EVENT:
          return true;
        case grpc::CompletionQueue::SHUTDOWN:
          return false;
        case grpc::CompletionQueue::TIMEOUT:
          break;
      }
    } while (std::chrono::steady_clock::now() < until);
  }
  return cq.Next(tag, ok);
}

// One Exists call whose answer this thread polls for (ClientOptions::exists_poll); with no
// polling, the generated blocking call.
grpc::Status ExistsPolling(v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx,
                           const v1::ExistsRequest& req, v1::ExistsResponse* resp, Nanos poll) {
  if (poll <= 0) return stub->Exists(ctx, req, resp);
  grpc::CompletionQueue cq;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ExistsResponse>> rpc =
      stub->PrepareAsyncExists(ctx, req, &cq);
  rpc->StartCall();
  rpc->Finish(resp, &status, &status);
  void* tag = nullptr;
  bool ok = false;
  const bool got = NextPolling(cq, &tag, &ok, poll);
  cq.Shutdown();
  void* drained = nullptr;
  bool drained_ok = false;
  while (cq.Next(&drained, &drained_ok)) {
  }
  if (!got || !ok) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the call's completion failed");
  }
  return status;
}

}  // namespace

std::vector<size_t> StoreClient::Impl::ExistsInFlight(uint64_t model_fingerprint,
                                                      std::span<const kv::BlockHash> hashes,
                                                      std::span<const ExistsPart> parts,
                                                      Nanos until, std::vector<bool>* found) {
  std::vector<size_t> failed;
  auto leader = Leader(/*refresh=*/false);
  if (!leader.ok() || (options.skip_addr && options.skip_addr(leader->second))) {
    for (size_t p = 0; p < parts.size(); ++p) failed.push_back(p);
    return failed;
  }
  v1::StoreMaster::Stub* stub = leader->first.get();
  // One call in flight: its context, request, answer and status live until the queue hands its
  // tag back. Each try gets CallMaster's deadline for a first try.
  struct Call {
    grpc::ClientContext ctx;
    v1::ExistsRequest req;
    v1::ExistsResponse resp;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ExistsResponse>> rpc;
  };
  std::vector<std::unique_ptr<Call>> calls(parts.size());
  // A queue of this call's own: the calling thread polls it in Next (with the completion-queue
  // API, gRPC does the reads and writes of these calls on the thread that waits in Next; no
  // thread of the client's is added), and concurrent Exists callers do not share tags.
  grpc::CompletionQueue cq;
  size_t next = 0, outstanding = 0;
  auto start = [&](size_t p) {
    auto c = std::make_unique<Call>();
    const Nanos left = std::max(until - Now(), kMinTry);
    c->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::nanoseconds(std::min(options.rpc_timeout, left)));
    c->req = ExistsRequestOf(model_fingerprint, hashes.subspan(parts[p].first, parts[p].count));
    c->rpc = stub->PrepareAsyncExists(&c->ctx, c->req, &cq);
    c->rpc->StartCall();
    c->rpc->Finish(&c->resp, &c->status, reinterpret_cast<void*>(p));
    calls[p] = std::move(c);
    ++outstanding;
  };
  const size_t window = std::min<size_t>(options.exists_in_flight, parts.size());
  while (next < window) start(next++);
  bool suspect = false;
  void* tag = nullptr;
  bool ok = false;
  while (outstanding > 0 && NextPolling(cq, &tag, &ok, options.exists_poll)) {
    --outstanding;
    const size_t p = reinterpret_cast<size_t>(tag);
    Call& c = *calls[p];
    Status s = ok ? FromGrpc(c.status, fmt::format("store master Exists at {}", leader->second))
                  : Unavailable("store master Exists: the call's completion failed");
    if (s.ok()) s = TakeExistsAnswer(parts[p], c.resp, found);
    if (!s.ok()) {
      // Tried again through CallMaster, with its retries; an error a leader change explains
      // makes that look in etcd first (as CallMaster's own second try would).
      suspect = suspect || RetryableMasterError(s);
      failed.push_back(p);
    }
    calls[p].reset();
    if (next < parts.size()) start(next++);
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (suspect) MarkLeaderSuspect();
  return failed;
}

Result<ExistsReply> StoreClient::Exists(uint64_t model_fingerprint,
                                        std::span<const kv::BlockHash> hashes) {
  if (hashes.empty()) return InvalidArgument("store exists: no keys");
  const size_t n = hashes.size();
  // Equal parts: enough of them that none exceeds kMaxBatchKeys (docs/store.md "Message
  // limits"), and with more than one call in flight, up to exists_in_flight parts of at least
  // kMinExistsPartKeys keys each.
  const size_t by_limit = (n + kMaxBatchKeys - 1) / kMaxBatchKeys;
  const size_t by_flight = std::min<size_t>(impl_->options.exists_in_flight,
                                            (n + kMinExistsPartKeys - 1) / kMinExistsPartKeys);
  const size_t num_parts = std::max(by_limit, by_flight);
  const size_t part_keys = (n + num_parts - 1) / num_parts;
  std::vector<ExistsPart> parts;
  for (size_t first = 0; first < n; first += part_keys) {
    parts.push_back(ExistsPart{first, std::min(part_keys, n - first)});
  }
  ExistsReply out;
  out.found.assign(n, false);
  const Nanos until = Now() + impl_->options.retry_deadline;
  std::vector<size_t> sync_parts;
  if (impl_->options.exists_in_flight > 1 && parts.size() > 1) {
    sync_parts = impl_->ExistsInFlight(model_fingerprint, hashes, parts, until, &out.found);
  } else {
    for (size_t p = 0; p < parts.size(); ++p) sync_parts.push_back(p);
  }
  // One call after another, each retried across leader changes (CallMaster): every part with one
  // call in flight, and the parts whose try in flight failed.
  for (size_t p : sync_parts) {
    const v1::ExistsRequest req =
        ExistsRequestOf(model_fingerprint, hashes.subspan(parts[p].first, parts[p].count));
    v1::ExistsResponse resp;
    RETURN_IF_ERROR(impl_->CallMaster("Exists", Now() + impl_->options.retry_deadline,
                                      [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
                                        return ExistsPolling(stub, ctx, req, &resp,
                                                             impl_->options.exists_poll);
                                      }));
    RETURN_IF_ERROR(TakeExistsAnswer(parts[p], resp, &out.found));
  }
  // The leading hits of the whole batch (each call's answer counts only its own part).
  while (out.prefix_hits < n && out.found[out.prefix_hits]) ++out.prefix_hits;
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
  const transfer::TransferEngine::Stats t = impl_->engine->GetStats();
  std::lock_guard lock(impl_->stats_mu);
  ClientStats out = impl_->stats;
  out.transfer_descs = t.descs_posted;
  out.transfer_ops = t.ops_posted;
  return out;
}

std::string StoreClient::leader() const {
  std::lock_guard lock(impl_->leader_mu);
  return impl_->leader_addr;
}

}  // namespace dualpath::store
