#include "dualpath/store/master_server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_server.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/log.h"
#include "dualpath/coord/leader_election.h"
#include "dualpath/coord/membership.h"
#include "dualpath/store/v1/store.grpc.pb.h"
#include "store/node_proto.h"

namespace dualpath::store {

namespace pb = ::dualpath::store::v1;

namespace {

constexpr std::string_view kMemberPrefix = "store-node-";
// Idle handler threads the master keeps (MasterServer::Start: no thread made per burst of calls).
constexpr int kMasterPollers = 16;

// Keys to and from the wire: store/node_proto.h's KeyFromProto and KeyToProto (one definition
// for the master, the nodes and the client).

void ReplicaToProto(const Replica& r, pb::Replica* out) {
  out->set_node(r.node.value());
  out->set_tier(static_cast<pb::Tier>(r.tier));
  out->set_offset(r.offset);
  out->set_size(r.size);
  out->set_checksum(r.checksum);
}

void StatusToProto(const Status& s, pb::ItemStatus* out) {
  out->set_code(static_cast<int32_t>(s.code()));
  if (!s.ok()) out->set_message(s.message());
}

// A time on the steady clock as Unix milliseconds (what the wire carries).
int64_t ToUnixMs(Nanos steady, Nanos steady_now) {
  const auto sys_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return sys_now + (steady - steady_now) / kNanosPerMilli;
}

TierSpec TierFromProto(const pb::TierSpec& t) {
  TierSpec spec;
  spec.capacity = t.capacity();
  if (t.high_watermark() > 0) spec.high_watermark = t.high_watermark();
  if (t.low_watermark() > 0) spec.low_watermark = t.low_watermark();
  return spec;
}

struct PendingPut {
  ObjectKey key;
  uint64_t size = 0;
  std::vector<Replica> locations;
  Nanos deadline = 0;
};

// A node's join report while its parts arrive (store.proto JoinNodeRequest).
struct PendingJoin {
  uint32_t next_part = 0;
  std::vector<ReportedReplica> reports;
};

// One leadership: the metadata this master rebuilt when it won, dropped when it loses.
struct Term {
  std::string id;
  Nanos started = 0;
  // Until then (or until every listed node joined) the term answers reads and writes with
  // UNAVAILABLE "rebuilding": the join grace, fixed or derived from the listed nodes' leases.
  Nanos serve_by = 0;
  std::unique_ptr<MasterState> state;
  std::atomic<bool> alive{true};
  std::atomic<bool> ready{false};
  std::atomic<bool> watch_broken{false};

  std::mutex mu;            // guards everything below
  std::set<NodeId> listed;  // store nodes etcd lists as live
  std::map<NodeId, pb::NodeEndpoint> joined;
  // The etcd revision of the node's registration its join was checked against: a delete event
  // older than that is the end of an earlier registration (the node re-registered and joined
  // before the watch delivered it) and must not drop the node.
  std::map<NodeId, int64_t> joined_revision;
  std::map<NodeId, std::unique_ptr<pb::StoreNode::Stub>> stubs;
  std::unordered_map<uint64_t, PendingPut> puts;
  // Joins reported in parts (JoinNodeRequest.more): the parts so far, applied with the last one.
  std::map<NodeId, PendingJoin> joining;
  std::unique_ptr<coord::Watch> node_watch;
};

}  // namespace

std::string StoreNodeMemberName(NodeId id) {
  return fmt::format("{}{}", kMemberPrefix, id.value());
}

std::optional<NodeId> ParseStoreNodeMemberName(std::string_view name) {
  if (!name.starts_with(kMemberPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kMemberPrefix.size());
  uint32_t v = 0;
  const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || p != digits.data() + digits.size() || v == 0 || digits.empty() ||
      digits[0] == '0') {
    return std::nullopt;
  }
  return NodeId(v);
}

class MasterServer::Impl final : public pb::StoreMaster::Service {
 public:
  MasterServerOptions options;
  const Clock& clock = SteadyClock::Default();
  std::unique_ptr<coord::EtcdClient> etcd;
  std::unique_ptr<coord::LeaderElection> election;
  std::unique_ptr<coord::Membership> membership;
  std::unique_ptr<coord::Watch> leader_watch;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::string advertise;

  mutable std::mutex mu;  // guards term, stop, lost, leader_value, terms
  std::condition_variable cv;
  std::shared_ptr<Term> term;
  bool stop = false;
  bool lost = false;
  bool abandoned = false;
  std::string leader_value;
  int64_t terms = 0;
  std::thread campaigner;
  std::thread ticker;

  // ---- leadership ----

  void CampaignLoop() {
    while (true) {
      {
        std::lock_guard lock(mu);
        if (stop) return;
        lost = false;
      }
      Status s = election->Campaign(kNanosPerSecond);
      if (!s.ok()) {
        if (s.code() != Code::kTimeout && s.code() != Code::kCancelled) {
          log::Warn("store master {}: campaign: {}", advertise, s.ToString());
          std::unique_lock lock(mu);
          cv.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop; });
        }
        continue;
      }
      Result<std::shared_ptr<Term>> t = BeginTerm();
      if (!t.ok()) {
        log::Warn("store master {}: won but cannot lead: {}", advertise, t.status().ToString());
        (void)election->Resign();
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop; });
        continue;
      }
      std::shared_ptr<Term> mine = *t;
      {
        std::unique_lock lock(mu);
        if (lost || stop) {
          mine->alive = false;
        } else {
          term = mine;
          ++terms;
          log::Info("store master {}: leading (term {}), {} store nodes listed", advertise,
                    mine->id, mine->listed.size());
          cv.wait(lock, [this] { return stop || lost; });
          term.reset();
        }
      }
      EndTerm(*mine);
    }
  }

  Result<std::shared_ptr<Term>> BeginTerm() {
    auto t = std::make_shared<Term>();
    t->started = clock.Now();
    {
      std::lock_guard lock(mu);
      t->id = fmt::format("{}#{}-{}", advertise, terms + 1, t->started);
    }
    ASSIGN_OR_RETURN(t->state, MasterState::Create(options.state, clock));
    // Readers may still read under pins they took on the previous leader.
    t->state->HoldEviction(clock.Now() + options.state.pin_ttl);
    std::vector<coord::NodeInfo> listed;
    RETURN_IF_ERROR(WatchNodes(t, &listed));
    const Nanos grace = options.join_grace ? *options.join_grace : DerivedJoinGrace(listed);
    t->serve_by = t->started + grace;
    log::Info("store master {}: waiting up to {:.2f} s for {} listed store nodes to join",
              advertise, ToSeconds(grace), listed.size());
    return t;
  }

  // How long a new leader waits for the listed nodes: every node etcd lists either joins (a live
  // node notices the new leader from its watch of the leader key at once) or its key goes when
  // its lease runs out (a dead node), which takes at most the lease's remaining TTL (etcd answers
  // it rounded down, and expires leases in a sweep every 500 ms: 2 s of slack). Waiting that long
  // means no reader sees the rebuilt map before a live node's objects are in it; a node that is
  // alive but cannot reach this master holds the readers up for one TTL, not forever.
  Nanos DerivedJoinGrace(const std::vector<coord::NodeInfo>& listed) {
    int64_t longest_s = -1;
    for (const coord::NodeInfo& n : listed) {
      if (!ParseStoreNodeMemberName(n.name) || n.lease == 0) continue;
      Result<int64_t> ttl = etcd->LeaseTimeToLive(n.lease);
      // A lease etcd no longer knows: its key is going; nothing to wait for.
      if (ttl.ok()) {
        longest_s = std::max(longest_s, *ttl);
      } else if (ttl.status().code() != Code::kCoordLeaseLost) {
        // etcd did not answer: assume the longest lease a node may hold.
        longest_s = std::max<int64_t>(longest_s, kMaxDerivedGraceS);
      }
    }
    if (longest_s < 0) return 0;
    return (std::min<int64_t>(longest_s, kMaxDerivedGraceS) + 2) * kNanosPerSecond;
  }
  // Bounds a derived grace (a node with an hour-long lease would hold every reader for an hour).
  static constexpr int64_t kMaxDerivedGraceS = 60;

  Status WatchNodes(const std::shared_ptr<Term>& t,
                    std::vector<coord::NodeInfo>* listed_out = nullptr) {
    std::weak_ptr<Term> weak = t;
    ASSIGN_OR_RETURN(coord::NodeWatch w, membership->WatchNodes(
                                             [this, weak](const coord::NodeEvent& ev) {
                                               std::shared_ptr<Term> term = weak.lock();
                                               if (term != nullptr) OnNodeEvent(*term, ev);
                                             },
                                             [weak, this](const Status& why) {
                                               log::Warn("store master {}: node watch ended: {}",
                                                         advertise, why.ToString());
                                               if (std::shared_ptr<Term> term = weak.lock())
                                                 term->watch_broken = true;
                                             }));
    std::set<NodeId> listed;
    for (const coord::NodeInfo& n : w.nodes) {
      if (auto id = ParseStoreNodeMemberName(n.name)) listed.insert(*id);
    }
    if (listed_out != nullptr) *listed_out = w.nodes;
    std::unique_ptr<coord::Watch> old;
    {
      std::lock_guard lock(t->mu);
      // Nodes that left while the watch was broken.
      for (auto it = t->joined.begin(); it != t->joined.end();) {
        if (listed.count(it->first) == 0) {
          DropNodeLocked(*t, it->first, "its etcd key is gone");
          it = t->joined.begin();
        } else {
          ++it;
        }
      }
      t->listed = std::move(listed);
      old = std::move(t->node_watch);
      t->node_watch = std::move(w.watch);
    }
    if (old != nullptr) old->Cancel();
    return Status::Ok();
  }

  void OnNodeEvent(Term& t, const coord::NodeEvent& ev) {
    const std::optional<NodeId> id = ParseStoreNodeMemberName(ev.name);
    if (!id) return;
    std::lock_guard lock(t.mu);
    if (ev.kind == coord::NodeEvent::Kind::kJoined) {
      t.listed.insert(*id);
      return;
    }
    auto j = t.joined_revision.find(*id);
    if (j != t.joined_revision.end() && ev.revision < j->second) {
      log::Info(
          "store master {}: node {}: ignoring the end of an earlier registration (revision "
          "{} < {})",
          advertise, id->value(), ev.revision, j->second);
      return;
    }
    t.listed.erase(*id);
    DropNodeLocked(t, *id, "its etcd lease expired or it left");
  }

  // t.mu held.
  void DropNodeLocked(Term& t, NodeId id, std::string_view why) {
    const bool was_joined = t.joined.erase(id) > 0;
    t.joined_revision.erase(id);
    t.joining.erase(id);
    t.stubs.erase(id);
    Status s = t.state->RemoveNode(id);
    if (was_joined || s.ok()) {
      log::Info("store master {}: node {} removed: {}", advertise, id.value(), why);
    }
  }

  void EndTerm(Term& t) {
    t.alive = false;
    std::unique_ptr<coord::Watch> w;
    {
      std::lock_guard lock(t.mu);
      w = std::move(t.node_watch);
    }
    if (w != nullptr) w->Cancel();
    log::Info("store master {}: term {} over", advertise, t.id);
  }

  void TickLoop() {
    const auto period = std::chrono::nanoseconds(options.tick_interval);
    std::unique_lock lock(mu);
    while (!stop) {
      if (cv.wait_for(lock, period, [this] { return stop; })) break;
      std::shared_ptr<Term> t = term;
      lock.unlock();
      if (t != nullptr && t->alive) Tick(t);
      lock.lock();
    }
  }

  void Tick(const std::shared_ptr<Term>& t) {
    t->state->Tick();
    if (t->watch_broken.exchange(false)) {
      Status s = WatchNodes(t);
      if (!s.ok()) {
        log::Warn("store master {}: re-watching nodes: {}", advertise, s.ToString());
        t->watch_broken = true;
      }
    }
    const Nanos now = clock.Now();
    std::lock_guard lock(t->mu);
    for (auto it = t->puts.begin(); it != t->puts.end();) {
      it = it->second.deadline < now ? t->puts.erase(it) : std::next(it);
    }
    if (!t->ready) {
      bool all = true;
      for (NodeId id : t->listed) all = all && t->joined.count(id) > 0;
      if (all || now >= t->serve_by) {
        t->ready = true;
        log::Info("store master {}: serving {:.3f} s after winning: {} of {} listed nodes joined",
                  advertise, ToSeconds(now - t->started), t->joined.size(), t->listed.size());
      }
    }
  }

  // The term to answer from, or the refusal.
  grpc::Status Leading(std::shared_ptr<Term>* out, bool need_ready = true) {
    std::shared_ptr<Term> t;
    std::string leader;
    {
      std::lock_guard lock(mu);
      t = term;
      leader = leader_value;
    }
    if (t == nullptr || !t->alive) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          fmt::format("{}: store master {} (leader: {})", kNotLeaderText, advertise,
                                      leader.empty() ? "none" : leader));
    }
    if (need_ready && !t->ready) {
      std::lock_guard lock(t->mu);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          fmt::format("store master {}: new leader rebuilding, {} of {} listed "
                                      "nodes joined",
                                      advertise, t->joined.size(), t->listed.size()));
    }
    *out = std::move(t);
    return grpc::Status::OK;
  }

  // Adds the endpoints of the nodes `replicas` name to `nodes` (once each).
  static void AddEndpoints(Term& t, const std::vector<Replica>& replicas, std::set<uint32_t>* seen,
                           google::protobuf::RepeatedPtrField<pb::NodeEndpoint>* nodes) {
    for (const Replica& r : replicas) {
      if (!seen->insert(r.node.value()).second) continue;
      auto it = t.joined.find(r.node);
      if (it != t.joined.end()) *nodes->Add() = it->second;
    }
  }

  pb::StoreNode::Stub* StubLocked(Term& t, NodeId id) {
    auto s = t.stubs.find(id);
    if (s != t.stubs.end()) return s->second.get();
    auto e = t.joined.find(id);
    if (e == t.joined.end() || e->second.rpc_addr().empty()) return nullptr;
    auto stub = pb::StoreNode::NewStub(MakeChannel(e->second.rpc_addr(), options.node_tls));
    pb::StoreNode::Stub* raw = stub.get();
    t.stubs.emplace(id, std::move(stub));
    return raw;
  }

  void ConfigureContext(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::nanoseconds(options.node_rpc_timeout));
  }

  // ---- StoreMaster ----

  grpc::Status PutStart(grpc::ServerContext*, const pb::PutStartRequest* req,
                        pb::PutStartResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    PutOptions opts;
    opts.replicas =
        req->replicas() == 0 ? 1 : static_cast<int>(std::min<uint32_t>(req->replicas(), 1000));
    opts.tier = static_cast<Tier>(req->tier());
    if (!IsValidTier(opts.tier)) {
      return ToGrpc(InvalidArgument(fmt::format("PutStart: tier {} is not DRAM (0) or SSD (1)",
                                                static_cast<int>(req->tier()))));
    }
    if (req->preferred_node() != 0) opts.preferred_node = NodeId(req->preferred_node());
    std::vector<std::pair<uint64_t, PendingPut>> started;
    std::vector<Replica> all_locations;
    const Nanos now = clock.Now();
    for (const pb::PutItem& item : req->items()) {
      pb::PutTicket* ticket = resp->add_tickets();
      Result<ObjectKey> key = KeyFromProto(item.key());
      Result<PutTicket> r =
          key.ok() ? t->state->PutStart(*key, item.size(), opts) : Result<PutTicket>(key.status());
      if (!r.ok()) {
        ticket->set_code(static_cast<int32_t>(r.status().code()));
        ticket->set_message(r.status().message());
        continue;
      }
      ticket->set_put_id(r->id.value());
      ticket->set_deadline_unix_ms(ToUnixMs(r->deadline, now));
      for (const Replica& loc : r->locations) ReplicaToProto(loc, ticket->add_locations());
      all_locations.insert(all_locations.end(), r->locations.begin(), r->locations.end());
      started.emplace_back(r->id.value(), PendingPut{*key, item.size(), r->locations, r->deadline});
    }
    std::lock_guard lock(t->mu);
    for (auto& [id, p] : started) t->puts.emplace(id, std::move(p));
    std::set<uint32_t> seen;
    AddEndpoints(*t, all_locations, &seen, resp->mutable_nodes());
    return grpc::Status::OK;
  }

  grpc::Status PutCommit(grpc::ServerContext*, const pb::PutCommitRequest* req,
                         pb::PutCommitResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    std::map<NodeId, pb::RecordRequest> records;
    for (const pb::PutCommitItem& item : req->items()) {
      std::optional<PendingPut> pending;
      {
        std::lock_guard lock(t->mu);
        auto it = t->puts.find(item.put_id());
        if (it != t->puts.end()) pending = it->second;
      }
      Status s = t->state->PutCommit(PutId(item.put_id()), item.checksum());
      StatusToProto(s, resp->add_results());
      if (!s.ok() || !pending) continue;
      {
        std::lock_guard lock(t->mu);
        t->puts.erase(item.put_id());
      }
      for (const Replica& loc : pending->locations) {
        pb::RecordRequest& rec = records[loc.node];
        pb::ReportedReplica* r = rec.add_replicas();
        KeyToProto(pending->key, r->mutable_key());
        r->set_tier(static_cast<pb::Tier>(loc.tier));
        r->set_offset(loc.offset);
        r->set_size(pending->size);
        r->set_checksum(item.checksum());
      }
    }
    // The nodes learn their new replicas before the writer learns of the commit, so that a node's
    // report to the next leader holds every acknowledged commit.
    for (auto& [node, rec] : records) {
      rec.set_leader_id(t->id);
      pb::StoreNode::Stub* stub;
      {
        std::lock_guard lock(t->mu);
        stub = StubLocked(*t, node);
      }
      if (stub == nullptr) continue;  // the node died meanwhile
      grpc::ClientContext ctx;
      ConfigureContext(&ctx);
      pb::RecordResponse rr;
      grpc::Status g = stub->Record(&ctx, rec, &rr);
      if (!g.ok()) {
        log::Warn("store master {}: Record of {} replicas on node {}: {}", advertise,
                  rec.replicas_size(), node.value(), g.error_message());
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status PutAbort(grpc::ServerContext*, const pb::PutAbortRequest* req,
                        pb::PutAbortResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    for (uint64_t id : req->put_ids()) {
      StatusToProto(t->state->PutAbort(PutId(id)), resp->add_results());
      std::lock_guard lock(t->mu);
      t->puts.erase(id);
    }
    return grpc::Status::OK;
  }

  static grpc::Status KeysFromProto(const google::protobuf::RepeatedPtrField<pb::ObjectKey>& in,
                                    std::vector<ObjectKey>* out, std::string_view call) {
    out->reserve(in.size());
    for (int i = 0; i < in.size(); ++i) {
      Result<ObjectKey> k = KeyFromProto(in[i]);
      if (!k.ok()) {
        return ToGrpc(
            InvalidArgument(fmt::format("{}: key {}: {}", call, i, k.status().message())));
      }
      out->push_back(*k);
    }
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const pb::GetRequest* req,
                   pb::GetResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    std::vector<ObjectKey> keys;
    if (grpc::Status g = KeysFromProto(req->keys(), &keys, "Get"); !g.ok()) return g;
    const Nanos now = clock.Now();
    GetResult r = t->state->Get(keys);
    if (r.pin) {
      resp->set_pin_id(r.pin->value());
      resp->set_pin_expires_unix_ms(ToUnixMs(r.pin_expires_at, now));
    }
    std::vector<Replica> all;
    for (const ObjectInfo& o : r.objects) {
      pb::ObjectInfo* info = resp->add_objects();
      info->set_found(o.found);
      if (!o.found) continue;
      info->set_size(o.size);
      info->set_checksum(o.checksum);
      for (const Replica& rep : o.replicas) ReplicaToProto(rep, info->add_replicas());
      all.insert(all.end(), o.replicas.begin(), o.replicas.end());
    }
    std::lock_guard lock(t->mu);
    std::set<uint32_t> seen;
    AddEndpoints(*t, all, &seen, resp->mutable_nodes());
    return grpc::Status::OK;
  }

  grpc::Status Unpin(grpc::ServerContext*, const pb::UnpinRequest* req,
                     pb::UnpinResponse*) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    return ToGrpc(t->state->Unpin(PinId(req->pin_id())));
  }

  grpc::Status RenewPin(grpc::ServerContext*, const pb::RenewPinRequest* req,
                        pb::RenewPinResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    const Nanos now = clock.Now();
    Result<Nanos> r = t->state->RenewPin(PinId(req->pin_id()));
    if (!r.ok()) return ToGrpc(r.status());
    resp->set_pin_expires_unix_ms(ToUnixMs(*r, now));
    return grpc::Status::OK;
  }

  grpc::Status Exists(grpc::ServerContext*, const pb::ExistsRequest* req,
                      pb::ExistsResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    const std::string& hashes = req->hashes();
    if (hashes.size() % 32 != 0) {
      return ToGrpc(InvalidArgument(fmt::format(
          "Exists: hashes is {} bytes, not a multiple of 32 (one 32-byte block hash per key)",
          hashes.size())));
    }
    std::vector<ObjectKey> keys(hashes.size() / 32);
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i].model_fingerprint = req->model_fingerprint();
      std::memcpy(keys[i].hash.bytes.data(), hashes.data() + i * 32, 32);
    }
    ExistsResult r = t->state->Exists(keys);
    resp->set_prefix_hits(r.prefix_hits);
    if (req->bits()) {
      resp->set_found_bits(PackFoundBits(r.found));  // what StoreClient asks for
    } else {
      resp->set_found(reinterpret_cast<const char*>(r.found.data()), r.found.size());
    }
    return grpc::Status::OK;
  }

  grpc::Status Remove(grpc::ServerContext*, const pb::RemoveRequest* req,
                      pb::RemoveResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t); !g.ok()) return g;
    std::vector<ObjectKey> keys;
    if (grpc::Status g = KeysFromProto(req->keys(), &keys, "Remove"); !g.ok()) return g;
    resp->set_removed(t->state->Remove(keys));
    // Every node forgets the keys before the caller learns they are gone, so that no report to a
    // later leader brings a removed object back.
    pb::ForgetRequest forget;
    forget.set_leader_id(t->id);
    *forget.mutable_keys() = req->keys();
    std::vector<std::pair<NodeId, pb::StoreNode::Stub*>> stubs;
    {
      std::lock_guard lock(t->mu);
      for (const auto& [id, ep] : t->joined) stubs.emplace_back(id, StubLocked(*t, id));
    }
    for (auto& [id, stub] : stubs) {
      if (stub == nullptr) continue;
      grpc::ClientContext ctx;
      ConfigureContext(&ctx);
      pb::ForgetResponse fr;
      grpc::Status g = stub->Forget(&ctx, forget, &fr);
      if (!g.ok()) {
        log::Warn("store master {}: Forget on node {}: {}", advertise, id.value(),
                  g.error_message());
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status JoinNode(grpc::ServerContext*, const pb::JoinNodeRequest* req,
                        pb::JoinNodeResponse* resp) override {
    std::shared_ptr<Term> t;
    if (grpc::Status g = Leading(&t, /*need_ready=*/false); !g.ok()) return g;
    const uint32_t raw = req->endpoint().node();
    if (raw == 0) return ToGrpc(InvalidArgument("JoinNode: node id 0 (ids start at 1)"));
    const NodeId id(raw);
    if (req->member_name() != StoreNodeMemberName(id)) {
      return ToGrpc(
          InvalidArgument(fmt::format("JoinNode: node {} must register in etcd as '{}', "
                                      "not '{}'",
                                      raw, StoreNodeMemberName(id), req->member_name())));
    }
    // The node's registration as etcd has it now: it must exist, and its revision fences off
    // delete events of earlier registrations that the watch may still deliver.
    Result<std::optional<coord::KeyValue>> reg =
        etcd->Get(coord::Membership::NodeKey(options.cluster, req->member_name()));
    if (!reg.ok()) return ToGrpc(reg.status());
    if (!reg->has_value()) {
      return ToGrpc(Status(Code::kStoreUnknownNode,
                           fmt::format("JoinNode: node {} is not registered in etcd under '{}' "
                                       "(register first)",
                                       raw, req->member_name())));
    }
    const int64_t registration_revision = (*reg)->mod_revision;
    NodeSpec spec;
    spec.id = id;
    spec.dram = TierFromProto(req->dram());
    spec.ssd = TierFromProto(req->ssd());
    std::vector<ReportedReplica> reports;
    reports.reserve(req->replicas_size());
    for (const pb::ReportedReplica& r : req->replicas()) {
      Result<ObjectKey> key = KeyFromProto(r.key());
      if (!key.ok()) {
        pb::ItemStatus* bad = resp->add_rejected();
        StatusToProto(key.status(), bad);
        continue;
      }
      reports.push_back(
          ReportedReplica{*key, static_cast<Tier>(r.tier()), r.offset(), r.size(), r.checksum()});
    }
    std::lock_guard lock(t->mu);
    // A report in parts (docs/store.md "Message limits"): the parts are kept, in order, and the
    // whole report is applied with the last one, so the node is never half-joined.
    if (req->part() > 0 || req->more()) {
      auto pending = t->joining.find(id);
      if (req->part() == 0) {
        pending = t->joining.insert_or_assign(id, PendingJoin{}).first;
      } else if (pending == t->joining.end() || pending->second.next_part != req->part()) {
        t->joining.erase(id);
        return ToGrpc(Status(Code::kFailedPrecondition,
                             fmt::format("JoinNode: node {} sent part {} out of order; start again "
                                         "at part 0",
                                         raw, req->part())));
      }
      PendingJoin& p = pending->second;
      // Every replica takes at least one aligned unit of the tiers: a longer report is not one.
      const uint64_t unit = options.state.alignment;
      uint64_t most = 0;
      if (__builtin_add_overflow(spec.dram.capacity / unit, spec.ssd.capacity / unit, &most)) {
        most = UINT64_MAX;
      }
      if (p.reports.size() + reports.size() > most) {
        t->joining.erase(id);
        return ToGrpc(InvalidArgument(fmt::format(
            "JoinNode: node {} reports more than {} replicas, more than its tiers can hold", raw,
            most)));
      }
      p.reports.insert(p.reports.end(), reports.begin(), reports.end());
      ++p.next_part;
      if (req->more()) {
        resp->set_leader_id(t->id);
        return grpc::Status::OK;
      }
      reports = std::move(p.reports);
      t->joining.erase(pending);
    } else {
      t->joining.erase(id);  // a whole report in one message ends any join in parts of the node
    }
    // A re-join replaces the node: what it reports now is what it holds.
    (void)t->state->RemoveNode(id);
    t->joined.erase(id);
    t->joined_revision.erase(id);
    t->stubs.erase(id);
    if (Status s = t->state->AddNode(spec); !s.ok()) return ToGrpc(s);
    Result<RebuildOutcome> out = t->state->RebuildFromReports(id, reports);
    if (!out.ok()) return ToGrpc(out.status());
    t->listed.insert(id);
    t->joined[id] = req->endpoint();
    t->joined_revision[id] = registration_revision;
    resp->set_accepted(out->accepted);
    for (const auto& [key, why] : out->rejected) {
      StatusToProto(Status(why.code(), fmt::format("{}: {}", key.ShortString(), why.message())),
                    resp->add_rejected());
    }
    resp->set_leader_id(t->id);
    log::Info("store master {}: node {} joined ({} replicas accepted, {} rejected)", advertise, raw,
              out->accepted, out->rejected.size());
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext*, const pb::StatsRequest*,
                     pb::StatsResponse* resp) override {
    std::shared_ptr<Term> t;
    {
      std::lock_guard lock(mu);
      t = term;
    }
    if (t == nullptr || !t->alive) {
      resp->set_leader(false);
      return grpc::Status::OK;
    }
    resp->set_leader(true);
    resp->set_leader_id(t->id);
    const MasterStats s = t->state->Stats();
    resp->set_nodes(s.nodes);
    resp->set_objects(s.objects);
    resp->set_pending_puts(s.pending_puts);
    resp->set_pins(s.pins);
    resp->set_evicted_replicas(s.evicted_replicas);
    resp->set_expired_puts(s.expired_puts);
    resp->set_expired_pins(s.expired_pins);
    for (NodeId id : t->state->LiveNodes()) {
      Result<TierUsage> u = t->state->Usage(id, Tier::kDram);
      if (!u.ok()) continue;
      pb::NodeUsage* nu = resp->add_usage();
      nu->set_node(id.value());
      nu->set_dram_capacity(u->capacity);
      nu->set_dram_used(u->used);
      nu->set_dram_replicas(u->replicas);
    }
    return grpc::Status::OK;
  }

  void Stop(bool resign) {
    {
      std::lock_guard lock(mu);
      if (stop) return;
      stop = true;
      abandoned = !resign;
    }
    cv.notify_all();
    if (resign) {
      (void)election->Resign();
    } else {
      election->Abandon();
    }
    if (campaigner.joinable()) campaigner.join();
    if (ticker.joinable()) ticker.join();
    if (leader_watch != nullptr) leader_watch->Cancel();
    if (server != nullptr) {
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server->Wait();
    }
  }
};

MasterServer::MasterServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MasterServer::~MasterServer() { Shutdown(); }

Result<std::unique_ptr<MasterServer>> MasterServer::Start(MasterServerOptions options) {
  RETURN_IF_ERROR(coord::CheckCoordName(options.cluster, "cluster", 64));
  if (options.listen.empty()) return InvalidArgument("store master: empty --listen address");
  if (options.tick_interval <= 0) return InvalidArgument("store master: tick interval must be > 0");
  if (options.join_grace && *options.join_grace < 0) {
    return InvalidArgument("store master: join grace must be >= 0");
  }
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.options = std::move(options);
  // Checks the state config and the listener's TLS before anything connects or binds.
  RETURN_IF_ERROR(MasterState::Create(m.options.state, m.clock).status());
  RETURN_IF_ERROR(GrpcServerCredentials(m.options.tls, "store master", m.options.listen).status());
  ASSIGN_OR_RETURN(m.etcd, coord::EtcdClient::Connect(m.options.etcd));

  grpc::ServerBuilder builder;
  builder.SetMaxSendMessageSize(-1);
  // The sync server's pool keeps at most MAX_POLLERS idle threads (gRPC's default: 2) and makes a
  // new one whenever the last idle one takes a call. A client with several calls in flight (an
  // Exists sent in parts, StoreClient::ExistsInFlight) then made and joined threads on every
  // batch: ~1 ms of CPU per 1,000-key Exists, 2.5x the calls themselves. Idle threads wait on
  // the queue and cost nothing; kMasterPollers of them answer kMaxExistsInFlight-sized bursts of
  // a few clients without a thread's birth.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kMasterPollers);
  builder.RegisterService(&m);
  // Requests are bounded (store/types.h: kMaxMasterRequestBytes); answers are not (a Get of a
  // whole batch names every replica and node).
  ASSIGN_OR_RETURN(GrpcServerStart started,
                   StartGrpcServer(builder, "store master", m.options.listen, m.options.tls,
                                   kMaxMasterRequestBytes));
  m.server = std::move(started.server);
  m.address = std::move(started.address);
  m.advertise = m.options.advertise.empty() ? m.address : m.options.advertise;

  coord::MembershipOptions mo;
  mo.cluster = m.options.cluster;
  ASSIGN_OR_RETURN(m.membership, coord::Membership::Create(m.etcd.get(), mo));
  coord::ElectionOptions eo;
  eo.cluster = m.options.cluster;
  eo.ttl = m.options.election_ttl;
  Impl* raw = &m;
  eo.on_lost = [raw](const Status&) {
    {
      std::lock_guard lock(raw->mu);
      raw->lost = true;
      if (raw->term != nullptr) raw->term->alive = false;  // stop answering at once
    }
    raw->cv.notify_all();
  };
  ASSIGN_OR_RETURN(m.election,
                   coord::LeaderElection::Create(m.etcd.get(), std::move(eo), m.advertise));
  ASSIGN_OR_RETURN(m.leader_watch,
                   m.election->Observe([raw](const std::optional<std::string>& leader) {
                     std::lock_guard lock(raw->mu);
                     raw->leader_value = leader.value_or("");
                   }));
  m.campaigner = std::thread([raw] { raw->CampaignLoop(); });
  m.ticker = std::thread([raw] { raw->TickLoop(); });
  return std::unique_ptr<MasterServer>(new MasterServer(std::move(impl)));
}

const std::string& MasterServer::address() const { return impl_->address; }

bool MasterServer::IsLeader() const {
  std::lock_guard lock(impl_->mu);
  return impl_->term != nullptr && impl_->term->alive;
}

bool MasterServer::IsServing() const {
  std::lock_guard lock(impl_->mu);
  return impl_->term != nullptr && impl_->term->alive && impl_->term->ready;
}

Status MasterServer::WaitUntilServing(Nanos timeout) {
  const Nanos deadline = impl_->clock.Now() + timeout;
  std::unique_lock lock(impl_->mu);
  while (!(impl_->term != nullptr && impl_->term->alive && impl_->term->ready)) {
    if (impl_->stop) return Status(Code::kCancelled, "store master stopped");
    if (impl_->clock.Now() >= deadline) {
      return Timeout(fmt::format("store master {}: not serving as leader after {:.1f} s",
                                 impl_->advertise, ToSeconds(timeout)));
    }
    // `ready` flips on the tick thread, which does not signal: poll at the tick's own rate.
    impl_->cv.wait_for(lock, std::chrono::nanoseconds(impl_->options.tick_interval));
  }
  return Status::Ok();
}

std::optional<MasterStats> MasterServer::Stats() const {
  std::shared_ptr<Term> t;
  {
    std::lock_guard lock(impl_->mu);
    t = impl_->term;
  }
  if (t == nullptr || !t->alive) return std::nullopt;
  return t->state->Stats();
}

int64_t MasterServer::terms() const {
  std::lock_guard lock(impl_->mu);
  return impl_->terms;
}

void MasterServer::Shutdown() { impl_->Stop(/*resign=*/true); }

void MasterServer::Abandon() { impl_->Stop(/*resign=*/false); }

}  // namespace dualpath::store
