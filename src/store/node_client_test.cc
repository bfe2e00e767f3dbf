// StoreNode and StoreClient against a real etcd (coord's EtcdTestServer), real UCX (tcp on
// loopback) and real gRPC, with a FAKE StoreMaster written here: the real master server
// (store_master) is written in parallel, so this test double stands in for it. It wraps the real
// metadata core (MasterState), campaigns for leadership in etcd like the real one, records
// commits on the nodes (StoreNode.Record) and forgets removals (Forget), and refuses with
// FAILED_PRECONDITION "not the leader" (kCoordNotLeader) once it no longer leads.
//
// Checked: a node registers in etcd and joins the leader with its endpoint and report; a put and
// a get-into round-trip bytes over the transfer engine (staged and zero-copy) and through the
// same-host shm file; a corrupted replica is skipped for a good one, and when every replica is
// corrupted the get is a miss, never wrong bytes; exists and remove; a leader change makes the
// node join the new leader with its full report, and a client with the old leader cached retries
// on its own and reads the objects the new leader rebuilt from that report; a forged record (key
// B at key A's location and checksum) is a miss and a counted rejection (issue 25).
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_server.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/coord/leader_election.h"
#include "dualpath/coord/membership.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/store/client.h"
#include "dualpath/store/master_state.h"
#include "dualpath/store/node.h"
#include "dualpath/store/v1/store.grpc.pb.h"
#include "store/node_proto.h"
#include "store/node_test_util.h"

namespace dualpath::store {
namespace {

using namespace ::dualpath::store::testing;  // NOLINT(google-build-using-namespace)

int64_t WallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- the fake master ----

class FakeMaster final : public v1::StoreMaster::Service {
 public:
  FakeMaster(std::string name, coord::EtcdClient* etcd) : name_(std::move(name)) {
    MasterConfig config;
    config.put_timeout = 3600 * kNanosPerSecond;  // the clock never moves: nothing expires
    config.pin_ttl = 3600 * kNanosPerSecond;
    state_ = MasterState::Create(config, clock_).value();
    grpc::ServerBuilder builder;
    builder.RegisterService(this);
    auto started = StartGrpcServer(builder, "fake StoreMaster", "127.0.0.1:0", Insecure(),
                                   kMaxMasterRequestBytes);
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(started->server);
    address_ = started->address;
    election_ = coord::LeaderElection::Create(
                    etcd, coord::ElectionOptions{kCluster, 2 * kNanosPerSecond, {}}, address_)
                    .value();
  }
  ~FakeMaster() override {
    stopping_ = true;
    (void)election_->Resign();
    if (campaign_.joinable()) campaign_.join();
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }

  // Campaigns on a thread of its own (a standby waits there until the leader goes), and again
  // whenever it lost leadership (its lease went with a wiped etcd), until Resign or destruction.
  void Campaign() {
    campaign_ = std::thread([this] {
      while (!stopping_) {
        if (!election_->Campaign(kNanosPerSecond).ok()) continue;
        while (!stopping_ && election_->IsLeader()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling, bounded
        }
      }
    });
  }
  bool IsLeader() const { return election_->IsLeader(); }
  // Steps down for good (no new campaign).
  void Resign() {
    stopping_ = true;
    ASSERT_TRUE(election_->Resign().ok());
  }
  const std::string& address() const { return address_; }
  std::string leader_id() const { return name_ + "-incarnation"; }

  std::vector<v1::JoinNodeRequest> Joins() {
    std::lock_guard lock(mu_);
    return joins_;
  }
  size_t JoinsOf(uint32_t node) {
    size_t n = 0;
    for (const auto& j : Joins()) n += j.endpoint().node() == node ? 1 : 0;
    return n;
  }

  // ---- StoreMaster ----
  grpc::Status PutStart(grpc::ServerContext*, const v1::PutStartRequest* req,
                        v1::PutStartResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::lock_guard lock(mu_);
    std::map<uint32_t, bool> named;
    for (const v1::PutItem& item : req->items()) {
      v1::PutTicket* t = resp->add_tickets();
      Result<ObjectKey> key = KeyFromProto(item.key());
      if (!key.ok()) return ToGrpc(key.status());
      PutOptions options;
      options.replicas = static_cast<int>(std::max<uint32_t>(req->replicas(), 1));
      if (req->preferred_node() != 0) options.preferred_node = NodeId(req->preferred_node());
      Result<PutTicket> ticket = state_->PutStart(*key, item.size(), options);
      if (!ticket.ok()) {
        t->set_code(static_cast<int>(ticket.status().code()));
        t->set_message(ticket.status().message());
        continue;
      }
      t->set_put_id(ticket->id.value());
      for (const Replica& r : ticket->locations) {
        v1::Replica* loc = t->add_locations();
        loc->set_node(r.node.value());
        loc->set_tier(TierToProto(r.tier));
        loc->set_offset(r.offset);
        loc->set_size(r.size);
        named[r.node.value()] = true;
      }
      puts_[ticket->id.value()] = {*key, ticket->locations};
    }
    for (const auto& [node, _] : named) *resp->add_nodes() = endpoints_.at(node);
    return grpc::Status::OK;
  }

  grpc::Status PutCommit(grpc::ServerContext*, const v1::PutCommitRequest* req,
                         v1::PutCommitResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    for (const v1::PutCommitItem& item : req->items()) {
      v1::ItemStatus* r = resp->add_results();
      std::pair<ObjectKey, std::vector<Replica>> put;
      {
        std::lock_guard lock(mu_);
        auto it = puts_.find(item.put_id());
        if (it == puts_.end()) {
          r->set_code(static_cast<int>(Code::kStoreUnknownPut));
          continue;
        }
        put = it->second;
        puts_.erase(it);
      }
      // As the real master: record on every replica's node before the commit answers.
      for (const Replica& loc : put.second) {
        v1::RecordRequest rec;
        rec.set_leader_id(leader_id());
        v1::ReportedReplica* rr = rec.add_replicas();
        KeyToProto(put.first, rr->mutable_key());
        rr->set_tier(TierToProto(loc.tier));
        rr->set_offset(loc.offset);
        rr->set_size(loc.size);
        rr->set_checksum(item.checksum());
        v1::RecordResponse out;
        grpc::ClientContext ctx;
        Status s = FromGrpc(NodeStub(loc.node.value())->Record(&ctx, rec, &out), "Record");
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
      std::lock_guard lock(mu_);
      Status s = state_->PutCommit(PutId(item.put_id()), item.checksum());
      r->set_code(static_cast<int>(s.code()));
      r->set_message(s.message());
    }
    return grpc::Status::OK;
  }

  grpc::Status PutAbort(grpc::ServerContext*, const v1::PutAbortRequest* req,
                        v1::PutAbortResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::lock_guard lock(mu_);
    for (uint64_t id : req->put_ids()) {
      Status s = state_->PutAbort(PutId(id));
      puts_.erase(id);
      resp->add_results()->set_code(static_cast<int>(s.code()));
    }
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest* req,
                   v1::GetResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::vector<ObjectKey> keys;
    for (const v1::ObjectKey& k : req->keys()) keys.push_back(KeyFromProto(k).value());
    std::lock_guard lock(mu_);
    GetResult got = state_->Get(keys);
    if (got.pin) resp->set_pin_id(got.pin->value());
    // The lease a reader sees: pin_ttl_ms of wall time (the state's own clock never moves).
    resp->set_pin_expires_unix_ms(WallMillis() + pin_ttl_ms_);
    std::map<uint32_t, bool> named;
    for (const ObjectInfo& o : got.objects) {
      v1::ObjectInfo* out = resp->add_objects();
      out->set_found(o.found);
      out->set_size(o.size);
      out->set_checksum(o.checksum);
      for (const Replica& r : o.replicas) {
        v1::Replica* rep = out->add_replicas();
        rep->set_node(r.node.value());
        rep->set_tier(TierToProto(r.tier));
        rep->set_offset(r.offset);
        rep->set_size(r.size);
        rep->set_checksum(r.checksum);
        named[r.node.value()] = true;
      }
    }
    for (const auto& [node, _] : named) *resp->add_nodes() = endpoints_.at(node);
    ++gets_;
    return grpc::Status::OK;
  }

  grpc::Status Unpin(grpc::ServerContext*, const v1::UnpinRequest* req,
                     v1::UnpinResponse*) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::lock_guard lock(mu_);
    ++unpins_;
    return ToGrpc(state_->Unpin(PinId(req->pin_id())));
  }

  grpc::Status RenewPin(grpc::ServerContext*, const v1::RenewPinRequest* req,
                        v1::RenewPinResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::lock_guard lock(mu_);
    Result<Nanos> renewed = state_->RenewPin(PinId(req->pin_id()));
    if (!renewed.ok()) return ToGrpc(renewed.status());
    ++renewals_;
    resp->set_pin_expires_unix_ms(WallMillis() + pin_ttl_ms_);
    return grpc::Status::OK;
  }

  grpc::Status Exists(grpc::ServerContext*, const v1::ExistsRequest* req,
                      v1::ExistsResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::vector<ObjectKey> keys(req->hashes().size() / 32);
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i].model_fingerprint = req->model_fingerprint();
      std::memcpy(keys[i].hash.bytes.data(), req->hashes().data() + 32 * i, 32);
    }
    std::lock_guard lock(mu_);
    ExistsResult r = state_->Exists(keys);
    resp->set_prefix_hits(r.prefix_hits);
    // A byte per key whatever the request asks, as a master from before ExistsRequest.bits
    // answers: the client's compatible path (the real master's bits: node_master_test.cc).
    resp->set_found(std::string(r.found.begin(), r.found.end()));
    return grpc::Status::OK;
  }

  grpc::Status Remove(grpc::ServerContext*, const v1::RemoveRequest* req,
                      v1::RemoveResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::vector<ObjectKey> keys;
    for (const v1::ObjectKey& k : req->keys()) keys.push_back(KeyFromProto(k).value());
    std::vector<uint32_t> nodes;
    {
      std::lock_guard lock(mu_);
      resp->set_removed(state_->Remove(keys));
      for (const auto& [node, _] : endpoints_) nodes.push_back(node);
    }
    for (uint32_t node : nodes) {  // as the real master: forget on every node
      v1::ForgetRequest forget;
      forget.set_leader_id(leader_id());
      *forget.mutable_keys() = req->keys();
      v1::ForgetResponse out;
      grpc::ClientContext ctx;
      Status s = FromGrpc(NodeStub(node)->Forget(&ctx, forget, &out), "Forget");
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return grpc::Status::OK;
  }

  grpc::Status JoinNode(grpc::ServerContext*, const v1::JoinNodeRequest* req,
                        v1::JoinNodeResponse* resp) override {
    if (grpc::Status s = CheckLeader(); !s.ok()) return s;
    std::lock_guard lock(mu_);
    joins_.push_back(*req);
    const NodeId id(req->endpoint().node());
    (void)state_->RemoveNode(id);  // a re-join replaces what the master knew
    NodeSpec spec;
    spec.id = id;
    spec.dram.capacity = req->dram().capacity();
    if (Status s = state_->AddNode(spec); !s.ok()) return ToGrpc(s);
    endpoints_[id.value()] = req->endpoint();
    stubs_.erase(id.value());
    std::vector<ReportedReplica> reports;
    for (const v1::ReportedReplica& r : req->replicas()) {
      NodeRecord rec = RecordFromProto(r).value();
      reports.push_back(ReportedReplica{rec.key, rec.tier, rec.offset, rec.size, rec.checksum});
    }
    auto rebuilt = state_->RebuildFromReports(id, reports);
    if (!rebuilt.ok()) return ToGrpc(rebuilt.status());
    resp->set_accepted(rebuilt->accepted);
    for (const auto& [key, why] : rebuilt->rejected) {
      v1::ItemStatus* r = resp->add_rejected();
      r->set_code(static_cast<int>(why.code()));
      r->set_message(why.message());
    }
    resp->set_leader_id(leader_id());
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* resp) override {
    resp->set_leader(election_->IsLeader());
    if (!resp->leader()) return grpc::Status::OK;
    resp->set_leader_id(leader_id());
    std::lock_guard lock(mu_);
    for (NodeId id : state_->LiveNodes()) resp->add_usage()->set_node(id.value());
    return grpc::Status::OK;
  }

  // The master loses the node (as the real one does when it sees the node's old etcd key go
  // after the node joined again).
  void DropNode(uint32_t node) {
    std::lock_guard lock(mu_);
    ASSERT_TRUE(state_->RemoveNode(NodeId(node)).ok());
  }

  // Where the master holds `key` now (found, size, checksum, replicas), without a pin.
  ObjectInfo Locate(const ObjectKey& key) {
    std::lock_guard lock(mu_);
    GetResult got = state_->Get(std::span<const ObjectKey>(&key, 1));
    if (got.pin) {
      EXPECT_TRUE(state_->Unpin(*got.pin).ok());
    }
    return got.objects[0];
  }
  // Puts a report straight into the master's state, as a peer that lies could (a forged Record
  // the node then reports, a forged JoinNode, a node with a stolen credential).
  Result<RebuildOutcome> Forge(uint32_t node, const ReportedReplica& report) {
    std::lock_guard lock(mu_);
    return state_->RebuildFromReports(NodeId(node), std::span<const ReportedReplica>(&report, 1));
  }

  uint64_t gets() const { return gets_.load(); }
  uint64_t renewals() const { return renewals_.load(); }
  // 0: every pin a reader gets is already in the second half of its lease.
  void SetPinTtlMillis(int64_t ms) { pin_ttl_ms_ = ms; }
  uint64_t unpins() const { return unpins_.load(); }
  MasterStats StateStats() {
    std::lock_guard lock(mu_);
    return state_->Stats();
  }

 private:
  grpc::Status CheckLeader() {
    if (election_->IsLeader()) return grpc::Status::OK;
    // What the real master answers (store.proto): FAILED_PRECONDITION, kCoordNotLeader in the text.
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        Status(Code::kCoordNotLeader, name_ + " is not the leader").ToString());
  }

  v1::StoreNode::Stub* NodeStub(uint32_t node) {
    std::lock_guard lock(stub_mu_);
    auto& stub = node_stubs_[node];
    std::string addr;
    {
      std::lock_guard l(mu_);
      addr = endpoints_.at(node).rpc_addr();
    }
    if (!stub || stub_addr_[node] != addr) {
      stub = v1::StoreNode::NewStub(MakeChannel(addr, Insecure()));
      stub_addr_[node] = addr;
    }
    return stub.get();
  }

  std::string name_;
  ManualClock clock_;
  std::unique_ptr<MasterState> state_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<coord::LeaderElection> election_;
  std::thread campaign_;
  std::atomic<bool> stopping_{false};

  std::mutex mu_;
  std::vector<v1::JoinNodeRequest> joins_;
  std::map<uint32_t, v1::NodeEndpoint> endpoints_;
  std::map<uint32_t, bool> stubs_;
  std::map<uint64_t, std::pair<ObjectKey, std::vector<Replica>>> puts_;
  std::mutex stub_mu_;
  std::map<uint32_t, std::unique_ptr<v1::StoreNode::Stub>> node_stubs_;
  std::map<uint32_t, std::string> stub_addr_;
  std::atomic<uint64_t> gets_{0};
  std::atomic<uint64_t> unpins_{0};
  std::atomic<uint64_t> renewals_{0};
  std::atomic<int64_t> pin_ttl_ms_{3600 * 1000};
};

// ---- the fixture ----

class StoreNodeTest : public StoreEtcdFixture {
 protected:
  void StopAll() override {
    nodes_.clear();
    masters_.clear();
  }

  FakeMaster* AddMaster(const std::string& name) {
    masters_.push_back(std::make_unique<FakeMaster>(name, client_.get()));
    return masters_.back().get();
  }

  // A master that campaigns and has won: the leader the nodes will join; null (and the test has
  // failed) if it did not win within the wait limit.
  FakeMaster* AddLeader(const std::string& name) {
    FakeMaster* m = AddMaster(name);
    m->Campaign();
    const bool won = WaitUntil([&] { return m->IsLeader(); });
    EXPECT_TRUE(won) << "master " << name << " did not become the leader";
    return won ? m : nullptr;
  }

  std::vector<std::unique_ptr<FakeMaster>> masters_;
};

TEST_F(StoreNodeTest, NodesJoinAndBytesRoundTripRemoteLocalAndNeverCorrupted) {
  FakeMaster* master = AddLeader("A");
  ASSERT_NE(master, nullptr);
  StoreNode* n1 = AddNode(1);
  StoreNode* n2 = AddNode(2);
  ASSERT_TRUE(n1 && n2);

  // Registered in etcd under its member name, value its rpc address.
  auto members = coord::Membership::Create(client_.get(), {kCluster, 2 * kNanosPerSecond});
  ASSERT_TRUE(members.ok());
  auto listed = (*members)->ListNodes();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name, "store-node-1");
  EXPECT_EQ((*listed)[0].value, n1->address().rpc_addr);

  // Each joins the leader once with its endpoint, tier and (empty) report.
  ASSERT_TRUE(WaitUntil([&] { return master->JoinsOf(1) >= 1 && master->JoinsOf(2) >= 1; }));
  for (const v1::JoinNodeRequest& j : master->Joins()) {
    const StoreNode* n = j.endpoint().node() == 1 ? n1 : n2;
    EXPECT_EQ(j.member_name(), StoreNode::MemberName(n->address().id));
    EXPECT_EQ(j.endpoint().host(), n->address().host);
    EXPECT_EQ(j.endpoint().transfer_addr(), n->address().transfer_addr);
    EXPECT_EQ(j.endpoint().rpc_addr(), n->address().rpc_addr);
    EXPECT_EQ(j.endpoint().shm_path(), StoreNode::ShmPath(shm_dir_, kCluster, n->address().id));
    EXPECT_EQ(j.endpoint().dram_bytes(), kDram);
    EXPECT_EQ(j.dram().capacity(), kDram);
    EXPECT_EQ(j.replicas_size(), 0);
  }
  ASSERT_TRUE(WaitUntil([&] { return n1->Stats().leader_id == master->leader_id(); }));
  EXPECT_EQ(n1->Stats().joined_addr, master->address());

  // A remote-only client puts 4 objects on both nodes; the master recorded them on both.
  auto remote = NewStoreClient("", 2);
  ASSERT_NE(remote, nullptr);
  const auto put_began = std::chrono::steady_clock::now();
  PutAll(*remote, 0, 4);
  const auto put_took = std::chrono::steady_clock::now() - put_began;
  EXPECT_EQ(n1->Replicas().size(), 4u);
  EXPECT_EQ(n2->Replicas().size(), 4u);
  const ClientStats put_stats = remote->Stats();
  EXPECT_EQ(put_stats.bytes_written, 8 * kObject);
  // Where the put's time went: each phase ran and took some time, and together they fit inside
  // the call (a phase timed twice, or timed across calls, would exceed it).
  EXPECT_GT(put_stats.put_start_ns, 0u);
  EXPECT_GT(put_stats.put_write_ns, 0u);
  EXPECT_GT(put_stats.put_commit_ns, 0u);
  EXPECT_LE(put_stats.put_start_ns + put_stats.put_write_ns + put_stats.put_commit_ns,
            static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(put_took).count()));

  // Staged remote gets: the bytes came over the transfer engine.
  Read got = GetAll(*remote, 0, 4);
  ASSERT_EQ(got.results.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << got.results[i].status.ToString();
    EXPECT_EQ(got.results[i].source, ReadSource::kRemote);
    EXPECT_EQ(got.results[i].size, kObject);
    EXPECT_EQ(got.bufs[i], Bytes(i)) << "object " << i;
  }
  // The pin goes after GetInto returned, on the client's thread.
  EXPECT_TRUE(WaitUntil([&] { return master->unpins() == 1; }));
  EXPECT_TRUE(WaitUntil([&] { return remote->Stats().unpins == 1; }));
  // Zero-copy: a registered destination gets the bytes straight from the node.
  std::vector<std::byte> reg(2 * kObject);
  ASSERT_TRUE(remote->RegisterBuffer(reg.data(), reg.size()).ok());
  std::vector<GetItem> into = {GetItem{Key(1), std::span(reg).subspan(0, kObject)},
                               GetItem{Key(2), std::span(reg).subspan(kObject, kObject)}};
  auto zc = remote->GetInto(into);
  ASSERT_TRUE(zc.ok());
  EXPECT_TRUE((*zc)[0].status.ok() && (*zc)[1].status.ok());
  EXPECT_TRUE(std::equal(reg.begin(), reg.begin() + kObject, Bytes(1).begin()));
  EXPECT_TRUE(std::equal(reg.begin() + kObject, reg.end(), Bytes(2).begin()));

  // A client beside node 1 reads through node 1's shm file, and writes there too.
  auto local = NewStoreClient("host-1", 2, 1);
  ASSERT_NE(local, nullptr);
  Read near = GetAll(*local, 0, 4);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(near.results[i].status.ok()) << near.results[i].status.ToString();
    EXPECT_EQ(near.results[i].source, ReadSource::kLocal);
    EXPECT_EQ(near.results[i].node, NodeId(1));
    EXPECT_EQ(near.bufs[i], Bytes(i));
  }
  PutAll(*local, 10, 2);
  Read far = GetAll(*remote, 10, 2);
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(far.results[i].status.ok()) << far.results[i].status.ToString();
    EXPECT_EQ(far.bufs[i], Bytes(10 + i));
  }
  EXPECT_EQ(local->Stats().hits_local, 4u);

  // Object 0 corrupted on node 1: the local client skips its shm copy for node 2's.
  auto where = [&](StoreNode* n, uint32_t i) {
    for (const NodeReplica& r : n->Replicas()) {
      if (r.key == Key(i)) return r.offset;
    }
    ADD_FAILURE() << "object " << i << " not on node " << n->address().id;
    return uint64_t{0};
  };
  n1->dram_base()[where(n1, 0) + 100] ^= 0xff;
  master->SetPinTtlMillis(0);  // the second round (node 2's copy) must renew the pin first
  Read skip = GetAll(*local, 0, 1);
  master->SetPinTtlMillis(3600 * 1000);
  EXPECT_EQ(master->renewals(), 1u);
  EXPECT_EQ(local->Stats().pin_renewals, 1u);
  ASSERT_TRUE(skip.results[0].status.ok()) << skip.results[0].status.ToString();
  EXPECT_EQ(skip.results[0].source, ReadSource::kRemote);
  EXPECT_EQ(skip.results[0].node, NodeId(2));
  EXPECT_EQ(skip.bufs[0], Bytes(0));
  EXPECT_GE(local->Stats().bad_replicas, 1u);
  // ... and on node 2 too: a miss, whichever client.
  n2->dram_base()[where(n2, 0) + 5] ^= 0x01;
  for (StoreClient* c : {local.get(), remote.get()}) {
    Read miss = GetAll(*c, 0, 2);
    EXPECT_EQ(miss.results[0].status.code(), Code::kCorruption)
        << miss.results[0].status.ToString();
    EXPECT_EQ(miss.results[0].source, ReadSource::kNone);
    EXPECT_TRUE(miss.results[1].status.ok());  // the other object is untouched
    EXPECT_EQ(miss.bufs[1], Bytes(1));
  }
  EXPECT_GE(remote->Stats().misses, 1u);

  // A key never put is a miss; a too small buffer is a miss that says so.
  Read none = GetAll(*remote, 77, 1);
  EXPECT_EQ(none.results[0].status.code(), Code::kNotFound);
  std::vector<std::byte> small(100);
  std::vector<GetItem> tiny = {GetItem{Key(1), small}};
  auto t = remote->GetInto(tiny);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].status.code(), Code::kOutOfRange);

  // Exists (packed) and Remove; the nodes forgot the removed key.
  std::vector<kv::BlockHash> hashes = {Key(1).hash, Key(2).hash, Key(50).hash, Key(3).hash};
  auto ex = remote->Exists(Key(1).model_fingerprint, hashes);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->found, (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(ex->prefix_hits, 2u);
  std::vector<ObjectKey> gone = {Key(2)};
  auto removed = remote->Remove(gone);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 1u);
  ex = remote->Exists(Key(1).model_fingerprint, hashes);
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(ex->found, (std::vector<bool>{true, false, false, true}));
  for (StoreNode* n : {n1, n2}) {
    for (const NodeReplica& r : n->Replicas()) EXPECT_NE(r.key, Key(2));
  }

  // Bad input is refused before anything is sent.
  std::vector<PutItem> empty_item = {PutItem{Key(5), {}}};
  EXPECT_EQ(remote->Put(empty_item).status().code(), Code::kInvalidArgument);
}

// Issue 27: the client's remote puts travel in tcp segments of kStoreTcpSegBytes (one segment
// per object of up to 1 MiB). Objects of sizes around a segment's payload, put from registered
// memory (zero-copy, as `batch_put_from` of registered buffers does) and from plain memory (the
// staging copy), arrive byte for byte; a byte flipped in the node's copy at a segment boundary
// is a miss for the reader, never its bytes.
TEST_F(StoreNodeTest, RemotePutsAroundTheTcpSegmentSizeRoundTripAndCorruptionIsAMiss) {
  FakeMaster* master = AddLeader("A");
  ASSERT_NE(master, nullptr);
  NodeOptions big = NodeOpts(1);
  big.dram_bytes = 32ull << 20;
  auto started = StoreNode::Start(big);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  nodes_.push_back(std::move(started).value());
  StoreNode* node = nodes_.back().get();
  ASSERT_TRUE(WaitUntil([&] { return master->JoinsOf(1) >= 1; }));
  auto client = NewStoreClient("", 1);
  ASSERT_NE(client, nullptr);

  const std::vector<size_t> sizes = {1,
                                     (1 << 20) - 1,
                                     1 << 20,
                                     (1 << 20) + 1,
                                     kStoreTcpSegBytes - 1,
                                     kStoreTcpSegBytes,
                                     kStoreTcpSegBytes + 1,
                                     2 * kStoreTcpSegBytes + 3};
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<std::byte> registered(total);
  ASSERT_TRUE(client->RegisterBuffer(registered.data(), registered.size()).ok());
  std::vector<std::vector<std::byte>> plain;
  std::vector<PutItem> items;
  size_t at = 0;
  for (uint32_t i = 0; i < sizes.size(); ++i) {
    std::vector<std::byte> b = Bytes(100 + i, sizes[i]);
    std::copy(b.begin(), b.end(), registered.begin() + static_cast<ptrdiff_t>(at));
    items.push_back(PutItem{Key(100 + i), std::span(registered).subspan(at, sizes[i])});
    at += sizes[i];
    plain.push_back(Bytes(200 + i, sizes[i]));
  }
  for (uint32_t i = 0; i < sizes.size(); ++i) items.push_back(PutItem{Key(200 + i), plain[i]});
  auto put = client->Put(items);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) ASSERT_TRUE(s.ok()) << s.ToString();

  auto read = [&](uint32_t k, size_t n) {
    std::vector<std::byte> into(n);
    std::vector<GetItem> get = {GetItem{Key(k), into}};
    auto r = client->GetInto(get);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    Status s = r.ok() ? (*r)[0].status : r.status();
    return std::make_pair(s, into);
  };
  for (uint32_t i = 0; i < sizes.size(); ++i) {
    for (uint32_t k : {100 + i, 200 + i}) {
      auto [s, got] = read(k, sizes[i]);
      ASSERT_TRUE(s.ok()) << "object " << k << " of " << sizes[i] << " B: " << s.ToString();
      EXPECT_EQ(got, Bytes(k, sizes[i])) << "object " << k << " of " << sizes[i] << " B";
    }
  }

  // The object of one segment's payload plus a byte: flip the byte where the first segment ends.
  const uint32_t torn = 100 + 6;
  ASSERT_EQ(sizes[6], kStoreTcpSegBytes + 1);
  uint64_t offset = UINT64_MAX;
  for (const NodeReplica& r : node->Replicas()) {
    if (r.key == Key(torn)) offset = r.offset;
  }
  ASSERT_NE(offset, UINT64_MAX);
  node->dram_base()[offset + kStoreTcpSegBytes - 1] ^= 0x40;
  auto [s, got] = read(torn, sizes[6]);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_GE(client->Stats().rejected, 1u);
}

TEST_F(StoreNodeTest, LeaderChangeRejoinsWithTheFullReportAndClientsRetry) {
  FakeMaster* a = AddLeader("A");
  ASSERT_NE(a, nullptr);
  FakeMaster* b = AddMaster("B");
  b->Campaign();  // a standby: waits for A's key to go
  StoreNode* n1 = AddNode(1);
  StoreNode* n2 = AddNode(2);
  ASSERT_TRUE(n1 && n2);
  ASSERT_TRUE(WaitUntil([&] { return a->JoinsOf(1) >= 1 && a->JoinsOf(2) >= 1; }));

  auto c = NewStoreClient("", 1);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 6);
  EXPECT_EQ(c->leader(), a->address());
  EXPECT_EQ(n1->Replicas().size() + n2->Replicas().size(), 6u);
  const uint64_t joins_before = n1->Stats().joins;

  // A steps down (it keeps serving, answering "not the leader"); B takes over.
  a->Resign();
  ASSERT_TRUE(WaitUntil([&] { return b->IsLeader(); }));
  // Both nodes join B with everything they hold.
  ASSERT_TRUE(WaitUntil([&] { return b->JoinsOf(1) >= 1 && b->JoinsOf(2) >= 1; }));
  size_t reported = 0;
  for (const v1::JoinNodeRequest& j : b->Joins()) reported += j.replicas_size();
  EXPECT_EQ(reported, 6u);
  ASSERT_TRUE(WaitUntil([&] { return n1->Stats().leader_id == b->leader_id(); }));
  EXPECT_GT(n1->Stats().joins, joins_before);
  EXPECT_EQ(b->StateStats().objects, 6u);

  // The client still has A cached: A refuses, the client re-reads etcd and gets from B.
  const uint64_t retries_before = c->Stats().retries;
  Read got = GetAll(*c, 0, 6);
  ASSERT_EQ(got.results.size(), 6u);
  for (uint32_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << got.results[i].status.ToString();
    EXPECT_EQ(got.bufs[i], Bytes(i));
  }
  EXPECT_GT(c->Stats().retries, retries_before);
  EXPECT_EQ(c->leader(), b->address());
  EXPECT_GE(b->gets(), 1u);

  // The leader forgets node 1: the node sees it in the leader's Stats and joins again with its
  // report, so its objects are served again.
  const size_t joins_1 = b->JoinsOf(1);
  const size_t n1_objects = n1->Replicas().size();
  b->DropNode(1);
  ASSERT_TRUE(WaitUntil([&] { return b->JoinsOf(1) > joins_1; }));
  EXPECT_GE(n1->Stats().forgotten, 1u);
  EXPECT_EQ(static_cast<size_t>(b->Joins().back().replicas_size()), n1_objects);
  Read again = GetAll(*c, 0, 6);
  for (uint32_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(again.results[i].status.ok()) << again.results[i].status.ToString();
    EXPECT_EQ(again.bufs[i], Bytes(i));
  }

  // A node asked to re-join (a master said kStoreUnknownNode) joins again.
  const size_t b_joins = b->JoinsOf(2);
  n2->RequestRejoin();
  ASSERT_TRUE(WaitUntil([&] { return b->JoinsOf(2) > b_joins; }));
}

TEST_F(StoreNodeTest, EtcdWipedTheNodeReRegistersAndRejoinsWithItsReport) {
  FakeMaster* master = AddLeader("A");
  ASSERT_NE(master, nullptr);
  StoreNode* n1 = AddNode(1);
  ASSERT_NE(n1, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return master->JoinsOf(1) >= 1; }));
  auto c = NewStoreClient("", 1);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 2);
  EXPECT_EQ(n1->Stats().registrations, 1);

  // etcd comes back without its data: the node's lease is gone, so it registers again under a
  // new one (and the master campaigns again); the node then joins again with both replicas.
  RestartEtcd(/*wipe=*/true);
  ASSERT_TRUE(WaitUntil([&] { return n1->Stats().registrations >= 2; }));
  ASSERT_TRUE(WaitUntil([&] {
    const auto joins = master->Joins();
    return joins.size() >= 2 && joins.back().replicas_size() == 2;
  }));
  Read got = GetAll(*c, 0, 2);
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << got.results[i].status.ToString();
    EXPECT_EQ(got.bufs[i], Bytes(i));
  }
}

// Issue 25 acceptance 3: a forged record — key B mapped to key A's location, size and checksum,
// injected through the master's state (the peer has every credential it needs) — is a miss and a
// counted rejection for every reader, through the same-host shm file and over the network, never
// A's bytes served as B's: the checksum is recomputed under the key the reader asked for.
TEST_F(StoreNodeTest, AForgedRecordOfAnotherKeysLocationIsAMissNeverBytes) {
  FakeMaster* master = AddLeader("A");
  ASSERT_NE(master, nullptr);
  StoreNode* n1 = AddNode(1);
  ASSERT_NE(n1, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return master->JoinsOf(1) >= 1; }));
  auto local = NewStoreClient("host-1", 1, 1);  // beside node 1: reads its shm file
  auto remote = NewStoreClient("", 1);          // reads over the transfer engine
  ASSERT_TRUE(local && remote);
  PutAll(*remote, 0, 1);
  const ObjectInfo a = master->Locate(Key(0));
  ASSERT_TRUE(a.found);
  ASSERT_EQ(a.replicas.size(), 1u);
  // A is removed (its space is free in the master; its bytes stay in the tier), then a peer
  // claims B lives there, with A's size and checksum.
  ASSERT_EQ(remote->Remove(std::vector<ObjectKey>{Key(0)}).value(), 1u);
  Result<RebuildOutcome> forged = master->Forge(
      1, ReportedReplica{Key(1), Tier::kDram, a.replicas[0].offset, a.size, a.checksum});
  ASSERT_TRUE(forged.ok()) << forged.status().ToString();
  ASSERT_EQ(forged->accepted, 1u);
  ASSERT_TRUE(master->Locate(Key(1)).found);

  for (StoreClient* c : {local.get(), remote.get()}) {
    Read got = GetAll(*c, 1, 1);
    ASSERT_EQ(got.results.size(), 1u);
    EXPECT_FALSE(got.results[0].status.ok()) << "key 1 served key 0's bytes";
    EXPECT_EQ(got.results[0].status.code(), Code::kCorruption) << got.results[0].status.ToString();
    const ClientStats st = c->Stats();
    EXPECT_EQ(st.rejected, 1u);
    EXPECT_EQ(st.misses, 1u);
    EXPECT_EQ(st.hits_local + st.hits_remote, 0u);
  }
  EXPECT_EQ(local->Stats().shm_refused, 0u);  // node 1's own file: mapped, and the bytes rejected
}

TEST_F(StoreNodeTest, ASameHostNodeWhoseFileCannotBeMappedIsUsedOverTheNetwork) {
  FakeMaster* master = AddLeader("A");
  ASSERT_NE(master, nullptr);
  StoreNode* n1 = AddNode(1);
  ASSERT_NE(n1, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return master->JoinsOf(1) >= 1; }));
  // The client is on node 1's host, but the file is gone from its path (the node keeps its
  // mapping): writes and reads fall back to the transfer engine.
  ASSERT_EQ(::unlink(n1->address().shm_path.c_str()), 0);
  auto c = NewStoreClient("host-1", 1, 1);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 3);
  Read got = GetAll(*c, 0, 3);
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << got.results[i].status.ToString();
    EXPECT_EQ(got.results[i].source, ReadSource::kRemote);
    EXPECT_EQ(got.bufs[i], Bytes(i));
  }
  EXPECT_EQ(c->Stats().hits_local, 0u);
}

TEST_F(StoreNodeTest, AbandonedNodeLeavesEtcdAndItsFileIsReplacedOnRestart) {
  FakeMaster* master = AddLeader("A");
  ASSERT_NE(master, nullptr);
  StoreNode* n1 = AddNode(1);
  ASSERT_NE(n1, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return master->JoinsOf(1) >= 1; }));
  const std::string path = n1->address().shm_path;
  // A second node with the same id refuses: the live node holds the file.
  NodeOptions dup;
  dup.cluster = kCluster;
  dup.etcd = Etcd();
  dup.id = NodeId(1);
  dup.dram_bytes = kDram;
  dup.shm_dir = shm_dir_;
  dup.rpc_tls = Insecure();
  EXPECT_EQ(StoreNode::Start(dup).status().code(), Code::kAlreadyExists);

  auto members = coord::Membership::Create(client_.get(), {kCluster, 2 * kNanosPerSecond});
  ASSERT_TRUE(members.ok());
  n1->Abandon();
  // The lease expires: the node leaves etcd; its file stays behind (as after kill -9).
  ASSERT_TRUE(WaitUntil([&] {
    auto l = (*members)->ListNodes();
    return l.ok() && l->empty();
  }));
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
  // A restart replaces the stale file and joins again; a clean shutdown removes the file.
  StoreNode* again = AddNode(1);
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return master->JoinsOf(1) >= 2; }));
  ASSERT_TRUE(again->Shutdown().ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  auto l = (*members)->ListNodes();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->empty());  // deregistered at once
}

}  // namespace
}  // namespace dualpath::store
