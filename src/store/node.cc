#include "dualpath/store/node.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_server.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/common/log.h"
#include "dualpath/coord/leader_election.h"
#include "dualpath/coord/membership.h"
#include "dualpath/store/v1/store.grpc.pb.h"
#include "store/node_proto.h"
#include "store/node_shm.h"
#include "store/node_table.h"

namespace dualpath::store {

namespace {

constexpr Nanos kJoinBackoffMin = 50 * kNanosPerMilli;
// How often the joiner looks at the membership's registration count when nothing wakes it.
constexpr Nanos kJoinerTick = 100 * kNanosPerMilli;

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

Status CheckOptions(const NodeOptions& o) {
  RETURN_IF_ERROR(coord::CheckCoordName(o.cluster, "cluster", 64));
  if (o.id.value() == 0) return InvalidArgument("store node id 0: ids start at 1");
  if (o.dram_bytes == 0) return InvalidArgument("store node dram_bytes 0: the DRAM tier is empty");
  const bool default_marks = o.high_watermark == 0 && o.low_watermark == 0;
  if (!default_marks &&
      !(o.low_watermark > 0 && o.low_watermark <= o.high_watermark && o.high_watermark <= 1)) {
    return InvalidArgument(
        fmt::format("store node watermarks low {} high {}: need 0 < low <= high <= 1 (or both 0)",
                    o.low_watermark, o.high_watermark));
  }
  if (o.shm_dir.empty()) return InvalidArgument("store node shm_dir is empty");
  if (o.transfer_listen.empty()) return InvalidArgument("store node transfer listen is empty");
  RETURN_IF_ERROR(CheckTransferIdleSpin(o.transfer.busy_poll, o.transfer.idle_spin, "store node"));
  if (o.rpc_listen.empty()) return InvalidArgument("store node rpc listen is empty");
  if (o.rpc_timeout <= 0) return InvalidArgument("store node rpc_timeout must be > 0");
  if (o.register_timeout <= 0) return InvalidArgument("store node register_timeout must be > 0");
  if (o.join_backoff_max < kJoinBackoffMin) {
    return InvalidArgument("store node join_backoff_max must be >= 50 ms");
  }
  if (o.leader_poll <= 0) return InvalidArgument("store node leader_poll must be > 0");
  if (o.join_part_replicas < 1 || o.join_part_replicas > kMaxJoinReplicas) {
    return InvalidArgument(fmt::format("store node join_part_replicas {}: must be 1..{}",
                                       o.join_part_replicas, kMaxJoinReplicas));
  }
  // As an engine's, before anything starts: the StoreNode listener's TLS (the one rule of
  // grpc_tls.h, applied again when it binds), then the transfer token: without it anyone who
  // reaches the transfer listener can read and write the DRAM tier (docs/store.md "Security").
  // Plaintext is asked for (--insecure), never a default.
  RETURN_IF_ERROR(GrpcServerCredentials(o.rpc_tls, "StoreNode", o.rpc_listen).status());
  if (o.transfer.token.empty() && !o.rpc_tls.insecure) {
    return InvalidArgument(
        "store node: the transfer engine needs the cluster's token (--transfer-token-file), or "
        "--insecure");
  }
  return Status::Ok();
}

grpc::Status BadRequest(const Status& s) { return ToGrpc(s); }

// A node process's incarnation: 64 random bits (never 0), so that a client never takes a
// restarted node's tier file for the one the master named, nor the other way round.
uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t{rd()} << 32) ^ rd();
  return v;
}

}  // namespace

// The StoreNode gRPC service: the leader's Record and Forget calls.
class NodeService final : public v1::StoreNode::Service {
 public:
  explicit NodeService(StoreNode::Impl* impl) : impl_(impl) {}
  grpc::Status Record(grpc::ServerContext*, const v1::RecordRequest* req,
                      v1::RecordResponse*) override;
  grpc::Status Forget(grpc::ServerContext*, const v1::ForgetRequest* req,
                      v1::ForgetResponse* resp) override;

 private:
  StoreNode::Impl* impl_;
};

// The node's state. Threads: gRPC handlers (Record, Forget), the leader watch's thread (OnLeader),
// the joiner (JoinLoop) and the caller's. Everything below `mu` is guarded by it; the members
// above it are set in Start and torn down in TearDown after the threads that use them stopped.
struct StoreNode::Impl {
  NodeOptions options;
  NodeAddress address;
  std::unique_ptr<ShmTier> shm;
  std::unique_ptr<transfer::TransferEngine> engine;
  std::unique_ptr<NodeService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<coord::EtcdClient> etcd;
  std::unique_ptr<coord::Membership> membership;
  std::unique_ptr<coord::LeaderElection> observer;  // never campaigns: Leader() and Observe()
  std::unique_ptr<coord::Watch> leader_watch;
  std::thread joiner;

  mutable std::mutex mu;
  std::condition_variable cv;
  NodeReplicaTable table;
  bool stop = false;
  bool down = false;  // Shutdown or Abandon ran
  // A join is wanted while join_wanted != join_done: every trigger raises join_wanted, a
  // successful join sets join_done to the value it started under.
  uint64_t join_wanted = 1;
  uint64_t join_done = 0;
  std::string leader_addr;
  NodeStats stats;
  // The master call the joiner has in flight (JoinNode, or the Stats that asks whether the leader
  // still lists this node) and the address it went to. When the leader key names another
  // address, OnLeader cancels it at once: a leader that hangs (frozen, cut off) would otherwise
  // hold the join to its successor up for a whole rpc_timeout, while the successor serves
  // without this node's objects.
  grpc::ClientContext* inflight = nullptr;
  std::string inflight_addr;

  explicit Impl(NodeOptions o) : options(std::move(o)), table({options.dram_bytes, /*ssd=*/0}) {}

  void OnLeader(const std::optional<std::string>& value) {
    log::Debug("store node {}: leader {}", options.id.value(), value.value_or("(none)"));
    {
      std::lock_guard lock(mu);
      leader_addr = value.value_or("");
      stats.leader_addr = leader_addr;
      // A put of the key (even with the same address: a restarted master) is a new leadership.
      if (value.has_value()) ++join_wanted;
      if (inflight != nullptr && inflight_addr != leader_addr) inflight->TryCancel();
    }
    cv.notify_all();
  }

  // Marks `ctx` as the joiner's call in flight to `addr` (nullptr: none). A call to an address
  // that is no longer the leader's is cancelled right away.
  void SetInflight(grpc::ClientContext* ctx, const std::string& addr) {
    std::lock_guard lock(mu);
    inflight = ctx;
    inflight_addr = addr;
    if (ctx != nullptr && addr != leader_addr) ctx->TryCancel();
  }

  void Trigger() {
    {
      std::lock_guard lock(mu);
      ++join_wanted;
    }
    cv.notify_all();
  }

  // The join report in parts of at most join_part_replicas replicas (store.proto JoinNodeRequest:
  // one message stays under the master's request limit however many replicas the node holds).
  std::vector<v1::JoinNodeRequest> MakeJoinRequests() const {  // REQUIRES(mu)
    v1::JoinNodeRequest head = MakeJoinHeader();
    std::vector<v1::JoinNodeRequest> parts(1, head);
    for (const NodeRecord& r : table.Records()) {
      if (static_cast<size_t>(parts.back().replicas_size()) >= options.join_part_replicas) {
        parts.back().set_more(true);
        parts.push_back(head);
        parts.back().set_part(static_cast<uint32_t>(parts.size() - 1));
      }
      RecordToProto(r, parts.back().add_replicas());
    }
    return parts;
  }

  v1::JoinNodeRequest MakeJoinHeader() const {  // REQUIRES(mu)
    v1::JoinNodeRequest req;
    v1::NodeEndpoint* ep = req.mutable_endpoint();
    ep->set_node(address.id.value());
    ep->set_host(address.host);
    ep->set_transfer_addr(address.transfer_addr);
    ep->set_rpc_addr(address.rpc_addr);
    ep->set_shm_path(address.shm_path);
    ep->set_dram_bytes(address.dram_bytes);
    ep->set_incarnation(address.incarnation);
    req.mutable_dram()->set_capacity(options.dram_bytes);
    req.mutable_dram()->set_high_watermark(options.high_watermark);
    req.mutable_dram()->set_low_watermark(options.low_watermark);
    req.set_member_name(MemberName(options.id));
    return req;
  }

  // Sends every part in order; `resp` is the last part's answer (the whole report's outcome) plus
  // the replicas earlier parts had rejected.
  Status CallJoin(const std::string& addr, const std::vector<v1::JoinNodeRequest>& parts,
                  v1::JoinNodeResponse* resp, std::string* channel_addr,
                  std::unique_ptr<v1::StoreMaster::Stub>* stub) {
    if (*channel_addr != addr || *stub == nullptr) {
      *stub = v1::StoreMaster::NewStub(MakeChannel(addr, options.master_tls));
      *channel_addr = addr;
    }
    google::protobuf::RepeatedPtrField<v1::ItemStatus> rejected;
    for (const v1::JoinNodeRequest& req : parts) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::nanoseconds(options.rpc_timeout));
      resp->Clear();
      // Each part is the call in flight: a leader change cancels it (SetInflight).
      SetInflight(&ctx, addr);
      grpc::Status g = (*stub)->JoinNode(&ctx, req, resp);
      SetInflight(nullptr, "");
      RETURN_IF_ERROR(FromGrpc(g, fmt::format("store master JoinNode at {} (part {} of {})", addr,
                                              req.part() + 1, parts.size())));
      if (req.more()) rejected.MergeFrom(resp->rejected());
    }
    rejected.MergeFrom(resp->rejected());
    resp->mutable_rejected()->Swap(&rejected);
    return Status::Ok();
  }

  // Whether the leader at `addr` answers Stats as the incarnation we joined (`joined_id`) or a
  // new one, without this node among the nodes it holds. False when it cannot be asked.
  bool LeaderForgotUs(const std::string& addr, const std::string& joined_id,
                      std::string* channel_addr, std::unique_ptr<v1::StoreMaster::Stub>* stub) {
    if (*channel_addr != addr || *stub == nullptr) {
      *stub = v1::StoreMaster::NewStub(MakeChannel(addr, options.master_tls));
      *channel_addr = addr;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::nanoseconds(options.rpc_timeout));
    v1::StatsRequest req;
    v1::StatsResponse resp;
    SetInflight(&ctx, addr);
    const bool answered = (*stub)->Stats(&ctx, req, &resp).ok();
    SetInflight(nullptr, "");
    if (!answered || !resp.leader()) return false;
    if (resp.leader_id() != joined_id) return true;  // another incarnation: it never saw our join
    for (const v1::NodeUsage& u : resp.usage()) {
      if (u.node() == options.id.value()) return false;
    }
    return true;
  }

  // The joiner thread: follows the triggers and joins the leader until it succeeds.
  void JoinLoop() {
    const Clock& clock = SteadyClock::Default();
    std::string channel_addr;
    std::unique_ptr<v1::StoreMaster::Stub> stub;
    int64_t seen_registrations = membership->registrations();
    Nanos backoff = kJoinBackoffMin;
    Nanos next_poll = clock.Now() + options.leader_poll;
    std::unique_lock lock(mu);
    while (!stop) {
      // A new lease (etcd lost ours, or came back without its data): the master dropped us.
      const int64_t regs = membership->registrations();
      if (regs != seen_registrations) {
        seen_registrations = regs;
        ++join_wanted;
      }
      if (clock.Now() >= next_poll) {
        // The watch can end for good (history compacted, etcd wiped); a re-read catches up.
        lock.unlock();
        auto leader = observer->Leader();
        lock.lock();
        next_poll = clock.Now() + options.leader_poll;
        if (leader.ok()) {
          const std::string now_addr = leader->has_value() ? (*leader)->value : "";
          if (now_addr != leader_addr) {
            leader_addr = now_addr;
            stats.leader_addr = now_addr;
            if (!now_addr.empty()) ++join_wanted;
          }
        }
        // Joined: does the leader still know us? It drops a node whose old etcd key it sees go
        // after the node joined again (a lease lost and renewed), or when it restarted; its
        // Stats lists the nodes it holds. Anything but "the same leader, without us" waits for
        // the leader key to tell.
        if (join_wanted == join_done && !stats.joined_addr.empty() &&
            stats.joined_addr == leader_addr) {
          const std::string addr = stats.joined_addr;
          const std::string joined_id = stats.leader_id;
          lock.unlock();
          const bool forgotten = LeaderForgotUs(addr, joined_id, &channel_addr, &stub);
          lock.lock();
          if (forgotten && join_wanted == join_done) {
            log::Warn("store node {}: leader {} at {} no longer lists this node: joining again",
                      options.id.value(), joined_id, addr);
            ++stats.forgotten;
            ++join_wanted;
          }
        }
        continue;
      }
      if (join_wanted != join_done && !leader_addr.empty()) {
        const uint64_t wanted = join_wanted;
        const std::string addr = leader_addr;
        const std::vector<v1::JoinNodeRequest> parts = MakeJoinRequests();
        size_t reported = 0;
        for (const v1::JoinNodeRequest& p : parts) reported += p.replicas_size();
        log::Debug("store node {}: joining {}", options.id.value(), addr);
        lock.unlock();
        v1::JoinNodeResponse resp;
        Status s = CallJoin(addr, parts, &resp, &channel_addr, &stub);
        lock.lock();
        if (s.ok()) {
          join_done = wanted;
          ++stats.joins;
          stats.leader_id = resp.leader_id();
          stats.joined_addr = addr;
          backoff = kJoinBackoffMin;
          log::Info(
              "store node {}: joined leader {} at {} ({} replicas reported in {} part(s), {} "
              "accepted)",
              options.id.value(), resp.leader_id(), addr, reported, parts.size(), resp.accepted());
          for (const v1::ItemStatus& r : resp.rejected()) {
            log::Warn("store node {}: leader rejected a reported replica: {} {}",
                      options.id.value(), r.code(), r.message());
          }
          continue;
        }
        ++stats.join_failures;
        log::Warn("store node {}: join failed (retrying in {} ms): {}", options.id.value(),
                  backoff / kNanosPerMilli, s.ToString());
        // A new leader ends the wait at once: the failure may have been the old one's.
        cv.wait_for(lock, std::chrono::nanoseconds(backoff),
                    [&] { return stop || leader_addr != addr; });
        backoff = std::min(backoff * 2, options.join_backoff_max);
        continue;
      }
      const Nanos wait = std::min(kJoinerTick, std::max<Nanos>(next_poll - clock.Now(), 0));
      cv.wait_for(lock, std::chrono::nanoseconds(wait),
                  [&] { return stop || (join_wanted != join_done && !leader_addr.empty()); });
    }
  }

  // Stops the threads, the watch and the servers. `clean`: deregister and remove the file.
  Status TearDown(bool clean) {
    {
      std::lock_guard lock(mu);
      if (down) return Status::Ok();
      down = true;
      stop = true;
    }
    cv.notify_all();
    Status status;
    if (membership) {
      if (clean) {
        status = membership->Deregister();
      } else {
        membership->Abandon();
      }
    }
    if (leader_watch) leader_watch->Cancel();
    if (joiner.joinable()) joiner.join();
    if (server) {
      server->Shutdown(std::chrono::system_clock::now());
      server->Wait();
    }
    // Peers see the transfer connections close, as after a crash.
    engine.reset();
    if (clean && shm) {
      Status removed = shm->RemoveFile();
      if (status.ok()) status = removed;
    }
    // Unmapped and closed: the flock goes (the mapping holds the file open too), so a restarted
    // node replaces an abandoned file as it would after kill -9.
    shm.reset();
    return status;
  }
};

grpc::Status NodeService::Record(grpc::ServerContext*, const v1::RecordRequest* req,
                                 v1::RecordResponse*) {
  std::vector<NodeRecord> records;
  records.reserve(req->replicas_size());
  std::lock_guard lock(impl_->mu);
  // All or nothing: every record is checked before any is applied.
  for (const v1::ReportedReplica& in : req->replicas()) {
    Result<NodeRecord> r = RecordFromProto(in);
    if (!r.ok()) return BadRequest(r.status().WithContext("Record"));
    Status ok = impl_->table.Check(*r);
    if (!ok.ok()) return BadRequest(ok.WithContext("Record"));
    records.push_back(*r);
  }
  for (const NodeRecord& r : records) impl_->table.Record(r);
  ++impl_->stats.records;
  return grpc::Status::OK;
}

grpc::Status NodeService::Forget(grpc::ServerContext*, const v1::ForgetRequest* req,
                                 v1::ForgetResponse* resp) {
  std::vector<ObjectKey> keys;
  keys.reserve(req->keys_size());
  for (const v1::ObjectKey& in : req->keys()) {
    Result<ObjectKey> k = KeyFromProto(in);
    if (!k.ok()) return BadRequest(k.status().WithContext("Forget"));
    keys.push_back(*k);
  }
  std::lock_guard lock(impl_->mu);
  uint64_t forgotten = 0;
  for (const ObjectKey& k : keys) forgotten += impl_->table.Forget(k) ? 1 : 0;
  ++impl_->stats.forgets;
  resp->set_forgotten(forgotten);
  return grpc::Status::OK;
}

StoreNode::StoreNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StoreNode::~StoreNode() { (void)impl_->TearDown(/*clean=*/true); }

std::string StoreNode::ShmPath(const std::string& shm_dir, const std::string& cluster, NodeId id) {
  return fmt::format("{}/dualpath-store-{}-{}", shm_dir, cluster, id.value());
}

std::string StoreNode::MemberName(NodeId id) { return fmt::format("store-node-{}", id.value()); }

Result<std::unique_ptr<StoreNode>> StoreNode::Start(NodeOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (options.host.empty()) options.host = HostName();
  auto impl = std::make_unique<Impl>(std::move(options));
  // The StoreNode owns the Impl from here on, so any failure below tears down what was started.
  std::unique_ptr<StoreNode> node(new StoreNode(std::move(impl)));
  Impl& n = *node->impl_;
  const NodeOptions& o = n.options;
  n.address.id = o.id;
  n.address.host = o.host;
  n.address.dram_bytes = o.dram_bytes;
  n.address.shm_path = ShmPath(o.shm_dir, o.cluster, o.id);

  n.address.incarnation = NewIncarnation();
  ASSIGN_OR_RETURN(n.shm, ShmTier::Create(n.address.shm_path, o.dram_bytes,
                                          TierIdentity{o.cluster, o.id, n.address.incarnation}));
  ASSIGN_OR_RETURN(n.engine, transfer::TransferEngine::Create(o.transfer));
  // Registered before Listen: every peer's HELLO carries the region.
  RETURN_IF_ERROR(n.engine->RegisterRegion(n.shm->data(), n.shm->size()).status());
  ASSIGN_OR_RETURN(n.address.transfer_addr, n.engine->Listen(o.transfer_listen));

  n.service = std::make_unique<NodeService>(&n);
  grpc::ServerBuilder builder;
  builder.RegisterService(n.service.get());
  // The master's Record and Forget calls are bounded by its batch limit (store/types.h).
  ASSIGN_OR_RETURN(GrpcServerStart started, StartGrpcServer(builder, "StoreNode", o.rpc_listen,
                                                            o.rpc_tls, kMaxNodeRequestBytes));
  n.server = std::move(started.server);
  n.address.rpc_addr = started.address;

  ASSIGN_OR_RETURN(n.etcd, coord::EtcdClient::Connect(o.etcd));
  ASSIGN_OR_RETURN(n.membership,
                   coord::Membership::Create(
                       n.etcd.get(), coord::MembershipOptions{o.cluster, o.membership_ttl}));
  // A node restarted after a crash waits for its predecessor's key to go (at most one TTL), and a
  // duplicate of a live node is refused within about one TTL: the wait covers both.
  RETURN_IF_ERROR(
      n.membership->Register(MemberName(o.id), n.address.rpc_addr,
                             std::max(o.register_timeout, o.membership_ttl + 5 * kNanosPerSecond)));
  ASSIGN_OR_RETURN(n.observer,
                   coord::LeaderElection::Create(
                       n.etcd.get(), coord::ElectionOptions{o.cluster, o.membership_ttl, {}}, ""));
  ASSIGN_OR_RETURN(n.leader_watch, n.observer->Observe([&n](const std::optional<std::string>& v) {
    n.OnLeader(v);
  }));
  n.joiner = std::thread([&n] { n.JoinLoop(); });
  log::Info("store node {} of cluster {}: {} bytes at {}, transfer {}, rpc {}", o.id.value(),
            o.cluster, o.dram_bytes, n.address.shm_path, n.address.transfer_addr,
            n.address.rpc_addr);
  return node;
}

Status StoreNode::Shutdown() { return impl_->TearDown(/*clean=*/true); }

void StoreNode::Abandon() { (void)impl_->TearDown(/*clean=*/false); }

const NodeAddress& StoreNode::address() const { return impl_->address; }

uint8_t* StoreNode::dram_base() const {
  std::lock_guard lock(impl_->mu);
  return impl_->down ? nullptr : impl_->shm->data();
}

std::vector<NodeReplica> StoreNode::Replicas() const {
  std::lock_guard lock(impl_->mu);
  std::vector<NodeReplica> out;
  for (const NodeRecord& r : impl_->table.Records()) {
    out.push_back(NodeReplica{r.key, r.tier, r.offset, r.size, r.checksum});
  }
  return out;
}

NodeStats StoreNode::Stats() const {
  std::lock_guard lock(impl_->mu);
  NodeStats s = impl_->stats;
  s.replicas = impl_->table.size();
  s.registrations = impl_->membership ? impl_->membership->registrations() : 0;
  return s;
}

void StoreNode::RequestRejoin() { impl_->Trigger(); }

}  // namespace dualpath::store
