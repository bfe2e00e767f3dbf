// MasterServer against a real etcd and real gRPC. Store nodes are played by the test: it registers
// their etcd membership itself and serves a recording test double of the StoreNode service.
#include "dualpath/store/master_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_server.h"
#include "dualpath/coord/etcd_test_server.h"
#include "dualpath/coord/leader_election.h"
#include "dualpath/coord/membership.h"
#include "dualpath/store/v1/store.grpc.pb.h"

namespace dualpath::store {
namespace {

namespace pb = ::dualpath::store::v1;
using coord::EtcdClient;
using coord::EtcdTestServer;

constexpr Nanos kLimit = 60 * kNanosPerSecond;  // hang guard of every wait, not a timing check

bool WaitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kLimit);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

GrpcTls Insecure() {
  GrpcTls tls;
  tls.insecure = true;
  return tls;
}

pb::ObjectKey Key(uint8_t n) {
  pb::ObjectKey k;
  k.set_model_fingerprint(7);
  std::string h(32, '\0');
  h[0] = static_cast<char>(n);
  h[31] = 'k';
  k.set_hash(h);
  return k;
}

// A store node's StoreNode service that records what the master tells it.
class FakeNode final : public pb::StoreNode::Service {
 public:
  grpc::Status Record(grpc::ServerContext*, const pb::RecordRequest* req,
                      pb::RecordResponse*) override {
    std::lock_guard lock(mu);
    for (const auto& r : req->replicas()) recorded.push_back(r);
    return grpc::Status::OK;
  }
  grpc::Status Forget(grpc::ServerContext*, const pb::ForgetRequest* req,
                      pb::ForgetResponse*) override {
    std::lock_guard lock(mu);
    forgotten += req->keys_size();
    return grpc::Status::OK;
  }
  std::vector<pb::ReportedReplica> Recorded() {
    std::lock_guard lock(mu);
    return recorded;
  }
  int Forgotten() {
    std::lock_guard lock(mu);
    return forgotten;
  }

  std::mutex mu;
  std::vector<pb::ReportedReplica> recorded;
  int forgotten = 0;
};

// One emulated store node: its etcd registration and its StoreNode server.
struct NodeDouble {
  uint32_t id = 0;
  std::unique_ptr<EtcdClient> etcd;
  std::unique_ptr<coord::Membership> membership;
  FakeNode service;
  std::unique_ptr<grpc::Server> server;
  std::string rpc_addr;

  pb::JoinNodeRequest JoinRequest(uint64_t dram) const {
    pb::JoinNodeRequest req;
    req.mutable_endpoint()->set_node(id);
    req.mutable_endpoint()->set_host("test-host");
    req.mutable_endpoint()->set_transfer_addr("127.0.0.1:1");
    req.mutable_endpoint()->set_rpc_addr(rpc_addr);
    req.mutable_dram()->set_capacity(dram);
    req.set_member_name(StoreNodeMemberName(NodeId(id)));
    return req;
  }
};

class MasterServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdTestServer::Binary().empty()) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd from Debian's etcd-server, "
                      "scripts/setup.sh): skipping the store master tests";
    }
    Status s = etcd_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  coord::EtcdOptions EtcdOpts() const {
    coord::EtcdOptions o;
    o.endpoints = etcd_.endpoint();
    o.tls.insecure = true;
    return o;
  }

  std::unique_ptr<MasterServer> StartMaster() {
    MasterServerOptions o;
    o.cluster = "storetest";
    o.etcd = EtcdOpts();
    o.listen = "127.0.0.1:0";
    o.tls = Insecure();
    o.node_tls = Insecure();
    o.election_ttl = kNanosPerSecond;
    o.join_grace = 0;
    o.tick_interval = 20 * kNanosPerMilli;
    auto m = MasterServer::Start(std::move(o));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(m).value() : nullptr;
  }

  std::unique_ptr<NodeDouble> StartNode(uint32_t id) {
    auto n = std::make_unique<NodeDouble>();
    n->id = id;
    auto c = EtcdClient::Connect(EtcdOpts());
    EXPECT_TRUE(c.ok());
    n->etcd = std::move(c).value();
    coord::MembershipOptions mo;
    mo.cluster = "storetest";
    mo.ttl = kNanosPerSecond;
    n->membership = coord::Membership::Create(n->etcd.get(), mo).value();
    Status r = n->membership->Register(StoreNodeMemberName(NodeId(id)), "x", kLimit);
    EXPECT_TRUE(r.ok()) << r.ToString();
    grpc::ServerBuilder b;
    b.RegisterService(&n->service);
    auto started = StartGrpcServer(b, "fake node", "127.0.0.1:0", Insecure(), kMaxNodeRequestBytes);
    EXPECT_TRUE(started.ok());
    n->server = std::move(started->server);
    n->rpc_addr = started->address;
    return n;
  }

  static std::unique_ptr<pb::StoreMaster::Stub> Stub(const MasterServer& m) {
    return pb::StoreMaster::NewStub(MakeChannel(m.address(), Insecure()));
  }

  template <typename Req, typename Resp, typename Fn>
  static grpc::Status Call(Fn fn, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return fn(&ctx, req, resp);
  }

  EtcdTestServer etcd_;
};

TEST_F(MasterServerTest, PutCommitRecordsOnTheNodeGetExistsRemoveForgets) {
  auto master = StartMaster();
  ASSERT_NE(master, nullptr);
  ASSERT_TRUE(master->WaitUntilServing(kLimit).ok());
  auto node = StartNode(1);
  auto stub = Stub(*master);

  pb::JoinNodeResponse jr;
  grpc::ClientContext jctx;
  ASSERT_TRUE(stub->JoinNode(&jctx, node->JoinRequest(1 << 20), &jr).ok());
  EXPECT_FALSE(jr.leader_id().empty());

  pb::PutStartRequest ps;
  auto* item = ps.add_items();
  *item->mutable_key() = Key(1);
  item->set_size(5000);
  pb::PutStartResponse psr;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub->PutStart(&c1, ps, &psr).ok());
  ASSERT_EQ(psr.tickets_size(), 1);
  ASSERT_EQ(psr.tickets(0).code(), 0) << psr.tickets(0).message();
  ASSERT_EQ(psr.tickets(0).locations_size(), 1);
  EXPECT_EQ(psr.tickets(0).locations(0).node(), 1u);
  ASSERT_EQ(psr.nodes_size(), 1);
  EXPECT_EQ(psr.nodes(0).rpc_addr(), node->rpc_addr);

  // Not visible before the commit.
  pb::ExistsRequest ex;
  ex.set_model_fingerprint(7);
  ex.set_hashes(Key(1).hash() + Key(2).hash());
  pb::ExistsResponse exr;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub->Exists(&c2, ex, &exr).ok());
  EXPECT_EQ(exr.found(), std::string("\0\0", 2));
  EXPECT_TRUE(node->service.Recorded().empty());

  pb::PutCommitRequest pc;
  auto* ci = pc.add_items();
  ci->set_put_id(psr.tickets(0).put_id());
  ci->set_checksum(0xabcdef);
  pb::PutCommitResponse pcr;
  grpc::ClientContext c3;
  ASSERT_TRUE(stub->PutCommit(&c3, pc, &pcr).ok());
  ASSERT_EQ(pcr.results(0).code(), 0) << pcr.results(0).message();
  // Recorded on the node before the commit answered.
  auto recorded = node->service.Recorded();
  ASSERT_EQ(recorded.size(), 1u);
  EXPECT_EQ(recorded[0].key().hash(), Key(1).hash());
  EXPECT_EQ(recorded[0].checksum(), 0xabcdefu);
  EXPECT_EQ(recorded[0].size(), 5000u);
  EXPECT_EQ(recorded[0].offset(), psr.tickets(0).locations(0).offset());

  grpc::ClientContext c4;
  ASSERT_TRUE(stub->Exists(&c4, ex, &exr).ok());
  EXPECT_EQ(exr.prefix_hits(), 1u);
  EXPECT_EQ(exr.found(), std::string("\1\0", 2));
  // Asked for bits (what StoreClient sends, issue 27): one bit per key, least significant first,
  // the bits past the last key 0, and no bytes. Keys: 1, 2, then 1 eight more times (10 keys).
  pb::ExistsRequest exb;
  exb.set_model_fingerprint(7);
  exb.set_bits(true);
  std::string ten = Key(1).hash() + Key(2).hash();
  for (int i = 0; i < 8; ++i) ten += Key(1).hash();
  exb.set_hashes(ten);
  pb::ExistsResponse exbr;
  grpc::ClientContext c4b;
  ASSERT_TRUE(stub->Exists(&c4b, exb, &exbr).ok());
  EXPECT_EQ(exbr.prefix_hits(), 1u);
  EXPECT_TRUE(exbr.found().empty());
  EXPECT_EQ(exbr.found_bits(), std::string("\xfd\x03", 2));

  pb::GetRequest g;
  *g.add_keys() = Key(1);
  *g.add_keys() = Key(2);
  pb::GetResponse gr;
  grpc::ClientContext c5;
  ASSERT_TRUE(stub->Get(&c5, g, &gr).ok());
  ASSERT_EQ(gr.objects_size(), 2);
  EXPECT_TRUE(gr.objects(0).found());
  EXPECT_FALSE(gr.objects(1).found());
  EXPECT_EQ(gr.objects(0).checksum(), 0xabcdefu);
  EXPECT_NE(gr.pin_id(), 0u);
  ASSERT_EQ(gr.nodes_size(), 1);
  pb::UnpinRequest up;
  up.set_pin_id(gr.pin_id());
  pb::UnpinResponse upr;
  grpc::ClientContext c6;
  EXPECT_TRUE(stub->Unpin(&c6, up, &upr).ok());
  grpc::ClientContext c7;
  EXPECT_FALSE(stub->Unpin(&c7, up, &upr).ok()) << "a second unpin of the same pin";

  pb::RemoveRequest rm;
  *rm.add_keys() = Key(1);
  pb::RemoveResponse rmr;
  grpc::ClientContext c8;
  ASSERT_TRUE(stub->Remove(&c8, rm, &rmr).ok());
  EXPECT_EQ(rmr.removed(), 1u);
  EXPECT_EQ(node->service.Forgotten(), 1);
  grpc::ClientContext c9;
  ASSERT_TRUE(stub->Exists(&c9, ex, &exr).ok());
  EXPECT_EQ(exr.prefix_hits(), 0u);
}

TEST_F(MasterServerTest, BadInputIsRefusedNamingWhatWasWrong) {
  auto master = StartMaster();
  ASSERT_NE(master, nullptr);
  ASSERT_TRUE(master->WaitUntilServing(kLimit).ok());
  auto stub = Stub(*master);

  pb::ExistsRequest ex;
  ex.set_hashes(std::string(33, 'x'));
  pb::ExistsResponse exr;
  grpc::ClientContext c1;
  grpc::Status s = stub->Exists(&c1, ex, &exr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("multiple of 32"), std::string::npos) << s.error_message();

  pb::GetRequest g;
  g.add_keys()->set_hash("short");
  pb::GetResponse gr;
  grpc::ClientContext c2;
  s = stub->Get(&c2, g, &gr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("hash of 5 bytes, not 32"), std::string::npos)
      << s.error_message();

  // A node etcd does not list cannot join.
  pb::JoinNodeRequest j;
  j.mutable_endpoint()->set_node(9);
  j.mutable_dram()->set_capacity(1 << 20);
  j.set_member_name(StoreNodeMemberName(NodeId(9)));
  pb::JoinNodeResponse jr;
  grpc::ClientContext c3;
  s = stub->JoinNode(&c3, j, &jr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find("not registered in etcd"), std::string::npos)
      << s.error_message();
  // Nor under another node's name.
  j.set_member_name("store-node-10");
  grpc::ClientContext c4;
  s = stub->JoinNode(&c4, j, &jr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A put with no live node.
  pb::PutStartRequest ps;
  auto* item = ps.add_items();
  *item->mutable_key() = Key(1);
  item->set_size(10);
  pb::PutStartResponse psr;
  grpc::ClientContext c5;
  ASSERT_TRUE(stub->PutStart(&c5, ps, &psr).ok());
  EXPECT_NE(psr.tickets(0).code(), 0);
  EXPECT_FALSE(psr.tickets(0).message().empty());

  ps.set_tier(static_cast<pb::Tier>(5));
  grpc::ClientContext c6;
  s = stub->PutStart(&c6, ps, &psr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Issue 25 item 7: a join report in parts (JoinNodeRequest.part / more) is applied whole with the
// last part; a part out of order is refused and the node starts again at part 0.
TEST_F(MasterServerTest, AJoinReportInPartsIsAppliedWhole) {
  auto master = StartMaster();
  ASSERT_NE(master, nullptr);
  ASSERT_TRUE(master->WaitUntilServing(kLimit).ok());
  auto node = StartNode(1);
  auto stub = Stub(*master);
  auto join = [&](uint32_t part, bool more, std::vector<uint8_t> keys, pb::JoinNodeResponse* r) {
    pb::JoinNodeRequest req = node->JoinRequest(1 << 20);
    req.set_part(part);
    req.set_more(more);
    for (uint8_t k : keys) {
      pb::ReportedReplica* rep = req.add_replicas();
      *rep->mutable_key() = Key(k);
      rep->set_offset(uint64_t{k} * 4096);
      rep->set_size(100);
      rep->set_checksum(k);
    }
    grpc::ClientContext ctx;
    return stub->JoinNode(&ctx, req, r);
  };
  pb::JoinNodeResponse r;
  grpc::Status s = join(1, false, {9}, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("out of order"), std::string::npos) << s.error_message();
  ASSERT_TRUE(join(0, true, {1, 2}, &r).ok());
  EXPECT_EQ(master->Stats()->nodes, 0u) << "not joined before the last part";
  ASSERT_TRUE(join(1, true, {3}, &r).ok());
  ASSERT_TRUE(join(2, false, {4, 5}, &r).ok());
  EXPECT_EQ(r.accepted(), 5u);
  EXPECT_EQ(master->Stats()->nodes, 1u);
  EXPECT_EQ(master->Stats()->objects, 5u);
  // A skipped part drops what came before: the node must start again.
  ASSERT_TRUE(join(0, true, {6}, &r).ok());
  s = join(2, false, {7}, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(master->Stats()->objects, 5u);
}

TEST_F(MasterServerTest, DeadNodeReplicasAreNeverHandedOut) {
  auto master = StartMaster();
  ASSERT_NE(master, nullptr);
  ASSERT_TRUE(master->WaitUntilServing(kLimit).ok());
  auto n1 = StartNode(1);
  auto n2 = StartNode(2);
  auto stub = Stub(*master);
  for (auto* n : {n1.get(), n2.get()}) {
    pb::JoinNodeResponse jr;
    grpc::ClientContext c;
    ASSERT_TRUE(stub->JoinNode(&c, n->JoinRequest(1 << 20), &jr).ok());
  }
  // Two objects, one replica each, preferring node 1 and node 2.
  for (uint32_t n : {1u, 2u}) {
    pb::PutStartRequest ps;
    ps.set_preferred_node(n);
    auto* item = ps.add_items();
    *item->mutable_key() = Key(static_cast<uint8_t>(n));
    item->set_size(4096);
    pb::PutStartResponse psr;
    grpc::ClientContext c1;
    ASSERT_TRUE(stub->PutStart(&c1, ps, &psr).ok());
    ASSERT_EQ(psr.tickets(0).code(), 0);
    ASSERT_EQ(psr.tickets(0).locations(0).node(), n);
    pb::PutCommitRequest pc;
    pc.add_items()->set_put_id(psr.tickets(0).put_id());
    pb::PutCommitResponse pcr;
    grpc::ClientContext c2;
    ASSERT_TRUE(stub->PutCommit(&c2, pc, &pcr).ok());
    ASSERT_EQ(pcr.results(0).code(), 0);
  }
  // Node 1 dies as kill -9 would: its lease is no longer kept alive.
  n1->membership->Abandon();
  auto found = [&](uint8_t k) {
    pb::GetRequest g;
    *g.add_keys() = Key(k);
    pb::GetResponse gr;
    grpc::ClientContext c;
    EXPECT_TRUE(stub->Get(&c, g, &gr).ok());
    for (const auto& r : gr.objects(0).replicas()) EXPECT_NE(r.node(), 0u);
    return gr.objects(0).found();
  };
  ASSERT_TRUE(WaitUntil([&] { return !found(1); }));
  EXPECT_TRUE(found(2));
  // And no put is placed on it.
  pb::PutStartRequest ps;
  ps.set_preferred_node(1);
  auto* item = ps.add_items();
  *item->mutable_key() = Key(3);
  item->set_size(4096);
  pb::PutStartResponse psr;
  grpc::ClientContext c;
  ASSERT_TRUE(stub->PutStart(&c, ps, &psr).ok());
  ASSERT_EQ(psr.tickets(0).code(), 0);
  EXPECT_EQ(psr.tickets(0).locations(0).node(), 2u);
}

TEST_F(MasterServerTest, StandbyRefusesThenTakesOverAndRebuildsFromReports) {
  auto a = StartMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->WaitUntilServing(kLimit).ok());
  auto b = StartMaster();
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->IsLeader());

  auto stub_b = Stub(*b);
  pb::ExistsRequest ex;
  ex.set_model_fingerprint(7);
  ex.set_hashes(Key(1).hash());
  pb::ExistsResponse exr;
  grpc::ClientContext c1;
  grpc::Status s = stub_b->Exists(&c1, ex, &exr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(kNotLeaderText), std::string::npos) << s.error_message();

  // A committed object on node 1 under leader a.
  auto node = StartNode(1);
  auto stub_a = Stub(*a);
  pb::JoinNodeResponse jr;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_a->JoinNode(&c2, node->JoinRequest(1 << 20), &jr).ok());
  pb::PutStartRequest ps;
  auto* item = ps.add_items();
  *item->mutable_key() = Key(1);
  item->set_size(8192);
  pb::PutStartResponse psr;
  grpc::ClientContext c3;
  ASSERT_TRUE(stub_a->PutStart(&c3, ps, &psr).ok());
  pb::PutCommitRequest pc;
  auto* ci = pc.add_items();
  ci->set_put_id(psr.tickets(0).put_id());
  ci->set_checksum(42);
  pb::PutCommitResponse pcr;
  grpc::ClientContext c4;
  ASSERT_TRUE(stub_a->PutCommit(&c4, pc, &pcr).ok());
  ASSERT_EQ(pcr.results(0).code(), 0);

  // The leader dies without resigning; b takes over when a's lease expires.
  a->Abandon();
  ASSERT_TRUE(WaitUntil([&] { return b->IsLeader(); }));
  EXPECT_EQ(b->terms(), 1);
  // b does not serve until the listed node re-joined (join_grace is 0 here, so it may already:
  // either way a read answered now must not be a wrong miss once the node joined).
  // The node re-joins with its report: what the leader recorded on it.
  pb::JoinNodeRequest rejoin = node->JoinRequest(1 << 20);
  for (const auto& r : node->service.Recorded()) *rejoin.add_replicas() = r;
  ASSERT_EQ(rejoin.replicas_size(), 1);
  pb::JoinNodeResponse jr2;
  grpc::ClientContext c5;
  ASSERT_TRUE(stub_b->JoinNode(&c5, rejoin, &jr2).ok());
  EXPECT_EQ(jr2.accepted(), 1u);
  EXPECT_NE(jr2.leader_id(), jr.leader_id());
  ASSERT_TRUE(b->WaitUntilServing(kLimit).ok());
  pb::GetRequest g;
  *g.add_keys() = Key(1);
  pb::GetResponse gr;
  grpc::ClientContext c6;
  ASSERT_TRUE(stub_b->Get(&c6, g, &gr).ok());
  ASSERT_TRUE(gr.objects(0).found());
  EXPECT_EQ(gr.objects(0).checksum(), 42u);
  EXPECT_EQ(gr.objects(0).replicas(0).offset(), psr.tickets(0).locations(0).offset());
}

TEST_F(MasterServerTest, NewLeaderWaitsForListedNodesBeforeServing) {
  auto node = StartNode(1);
  MasterServerOptions o;
  o.cluster = "storetest";
  o.etcd = EtcdOpts();
  o.listen = "127.0.0.1:0";
  o.tls = Insecure();
  o.node_tls = Insecure();
  o.election_ttl = kNanosPerSecond;
  o.join_grace = 3600 * kNanosPerSecond;  // never serve for want of the grace
  o.tick_interval = 20 * kNanosPerMilli;
  auto m = MasterServer::Start(std::move(o));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(WaitUntil([&] { return (*m)->IsLeader(); }));
  auto stub = Stub(**m);
  pb::ExistsRequest ex;
  ex.set_hashes(Key(1).hash());
  pb::ExistsResponse exr;
  grpc::ClientContext c1;
  grpc::Status s = stub->Exists(&c1, ex, &exr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("rebuilding"), std::string::npos) << s.error_message();
  pb::JoinNodeResponse jr;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub->JoinNode(&c2, node->JoinRequest(1 << 20), &jr).ok());
  ASSERT_TRUE((*m)->WaitUntilServing(kLimit).ok());
  grpc::ClientContext c3;
  EXPECT_TRUE(stub->Exists(&c3, ex, &exr).ok());
}

TEST(StoreNodeMemberName, RoundTripsAndRejectsOthers) {
  EXPECT_EQ(StoreNodeMemberName(NodeId(12)), "store-node-12");
  EXPECT_EQ(ParseStoreNodeMemberName("store-node-12"), NodeId(12));
  EXPECT_FALSE(ParseStoreNodeMemberName("store-node-0"));
  EXPECT_FALSE(ParseStoreNodeMemberName("store-node-012"));
  EXPECT_FALSE(ParseStoreNodeMemberName("store-node-"));
  EXPECT_FALSE(ParseStoreNodeMemberName("store-node-1x"));
  EXPECT_FALSE(ParseStoreNodeMemberName("engine-1"));
}

}  // namespace
}  // namespace dualpath::store
