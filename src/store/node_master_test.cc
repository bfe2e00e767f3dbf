// StoreNode and StoreClient with the REAL master server (MasterServer, store_master), a real etcd,
// real UCX (tcp on loopback) and real gRPC: a put and get round trip through the elected leader,
// the same-host path, remove; kill -9 of the leader (Abandon) -> the standby takes over, the nodes
// join it with their reports, and a client that still has the dead leader cached retries on its
// own and reads every committed object; a dead node's replicas are never handed out; a forged
// JoinNode never makes a client map or write another file (issue 25); requests above the servers'
// limits are refused, join reports go in parts, client batches are split (issue 25 item 7).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/store/client.h"
#include "dualpath/store/master_server.h"
#include "dualpath/store/node.h"
#include "dualpath/store/v1/store.grpc.pb.h"
#include "lib/oversize_request.h"
#include "store/node_test_util.h"

namespace dualpath::store {
namespace {

using namespace ::dualpath::store::testing;  // NOLINT(google-build-using-namespace)

// The tier file's header page (store/node_shm.h kTierHeaderBytes): a victim file as large as a
// tier file passes every size check.
constexpr uint64_t kTierHeaderBytesForTest = 4096;

class StoreNodeMasterTest : public StoreEtcdFixture {
 protected:
  void StopAll() override {
    nodes_.clear();
    masters_.clear();
  }

  MasterServer* AddMaster() {
    MasterServerOptions o;
    o.cluster = kCluster;
    o.etcd = Etcd();
    o.listen = "127.0.0.1:0";
    o.tls = Insecure();
    o.node_tls = Insecure();
    o.election_ttl = 2 * kNanosPerSecond;
    auto m = MasterServer::Start(o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return nullptr;
    masters_.push_back(std::move(m).value());
    return masters_.back().get();
  }

  // One master serving as leader with store node 1 joined; null (the failure reported) if not.
  MasterServer* ServingMasterWithNode1() {
    MasterServer* m = AddMaster();
    if (m == nullptr) return nullptr;
    if (Status s = m->WaitUntilServing(kWaitLimit); !s.ok()) {
      ADD_FAILURE() << s.ToString();
      return nullptr;
    }
    if (AddNode(1) == nullptr || !WaitUntil([&] { return LiveNodes(m) == 1; })) {
      ADD_FAILURE() << "store node 1 did not join";
      return nullptr;
    }
    return m;
  }

  size_t LiveNodes(MasterServer* m) {
    auto s = m->Stats();
    return s ? s->nodes : 0;
  }
  size_t Objects(MasterServer* m) {
    auto s = m->Stats();
    return s ? s->objects : 0;
  }

  std::vector<std::unique_ptr<MasterServer>> masters_;
};

TEST_F(StoreNodeMasterTest, RoundTripAndTheStandbyServesEverythingAfterTheLeaderDies) {
  MasterServer* a = AddMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->WaitUntilServing(kWaitLimit).ok());
  MasterServer* b = AddMaster();  // a standby
  ASSERT_NE(b, nullptr);
  StoreNode* n1 = AddNode(1);
  StoreNode* n2 = AddNode(2);
  ASSERT_TRUE(n1 && n2);
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(a) == 2; }));

  auto remote = NewStoreClient("", 2);
  ASSERT_NE(remote, nullptr);
  PutAll(*remote, 0, 5);
  // A client sending Exists as 4 parts in flight, which caches A as the leader now.
  auto parts = NewStoreClient("", 1, 0, /*exists_in_flight=*/4);
  ASSERT_NE(parts, nullptr);
  std::vector<kv::BlockHash> probe;  // 1,000 keys: parts of 250, hits at 0..4 of every 10
  for (uint32_t i = 0; i < 1000; ++i) {
    ObjectKey k = Key(i % 10);
    if (i % 10 >= 5) k.hash.bytes[31] ^= 0x77;  // never stored
    probe.push_back(k.hash);
  }
  auto expect_probe = [&](const ExistsReply& r, uint32_t stored) {
    ASSERT_EQ(r.found.size(), probe.size());
    for (uint32_t i = 0; i < probe.size(); ++i) {
      ASSERT_EQ(r.found[i], i % 10 < stored) << "key " << i;
    }
    EXPECT_EQ(r.prefix_hits, stored);
  };
  auto before = parts->Exists(Key(0).model_fingerprint, probe);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  expect_probe(*before, 5);
  auto one_call = remote->Exists(Key(0).model_fingerprint, probe);  // the same, as one call
  ASSERT_TRUE(one_call.ok()) << one_call.status().ToString();
  EXPECT_EQ(one_call->found, before->found);
  // Polling for the answer (the default, both calls above) or sleeping until it comes: the same.
  auto sleeper = NewStoreClient("", 1, 0, /*exists_in_flight=*/1, /*exists_poll=*/0);
  ASSERT_NE(sleeper, nullptr);
  auto slept = sleeper->Exists(Key(0).model_fingerprint, probe);
  ASSERT_TRUE(slept.ok()) << slept.status().ToString();
  expect_probe(*slept, 5);
  // Out of range: refused when the client is made.
  ClientOptions bad_poll;
  bad_poll.cluster = kCluster;
  bad_poll.exists_poll = -1;
  auto refused = StoreClient::Create(bad_poll);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("exists_poll"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(Objects(a), 5u);
  // The leader recorded every commit on both nodes before it answered.
  EXPECT_EQ(n1->Replicas().size(), 5u);
  EXPECT_EQ(n2->Replicas().size(), 5u);
  Read got = GetAll(*remote, 0, 5);
  ASSERT_NO_FATAL_FAILURE(ExpectReadAll(got, 0, 5, ReadSource::kRemote));
  // A client whose transfer thread sleeps between events (an engine's store link) reads the same
  // bytes as one that polls while its gets are in flight (the default, `remote`).
  ASSERT_TRUE(ClientOptions{}.transfer_poll);
  auto sleeping = NewStoreClient("", 1, 0, 1, ClientOptions{}.exists_poll, /*transfer_poll=*/false);
  ASSERT_NE(sleeping, nullptr);
  Read slept_read = GetAll(*sleeping, 0, 5);
  ASSERT_NO_FATAL_FAILURE(ExpectReadAll(slept_read, 0, 5, ReadSource::kRemote));
  // Polling longer than 100 ms after the last event: refused when the client is made.
  ClientOptions long_spin;
  long_spin.cluster = kCluster;
  long_spin.transfer.busy_poll = true;
  long_spin.transfer.idle_spin = 101 * kNanosPerMilli;
  auto spin_refused = StoreClient::Create(long_spin);
  ASSERT_FALSE(spin_refused.ok());
  EXPECT_EQ(spin_refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(spin_refused.status().message().find("idle_spin"), std::string::npos)
      << spin_refused.status().ToString();
  auto local = NewStoreClient("host-2", 1, 2);
  ASSERT_NE(local, nullptr);
  Read near = GetAll(*local, 0, 5);
  ASSERT_NO_FATAL_FAILURE(ExpectReadAll(near, 0, 5, ReadSource::kLocal));
  // Removed: forgotten on the nodes before Remove answered.
  std::vector<ObjectKey> gone = {Key(4)};
  auto removed = remote->Remove(gone);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 1u);
  EXPECT_EQ(n1->Replicas().size(), 4u);
  const std::string first_leader_id = n1->Stats().leader_id;
  EXPECT_FALSE(first_leader_id.empty());

  // kill -9 of the leader: the standby wins when A's lease expires, the nodes join it with their
  // reports, and it serves the 4 committed objects.
  a->Abandon();
  ASSERT_TRUE(b->WaitUntilServing(kWaitLimit).ok());
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(b) == 2 && Objects(b) == 4; }));
  ASSERT_TRUE(WaitUntil([&] { return n1->Stats().leader_id != first_leader_id; }));
  EXPECT_EQ(n1->Stats().joined_addr, b->address());

  // The client still has A cached: it retries through etcd on its own.
  const uint64_t retries = remote->Stats().retries;
  Read after = GetAll(*remote, 0, 5);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(after.results[i].status.ok()) << i << ": " << after.results[i].status.ToString();
    EXPECT_EQ(after.bufs[i], Bytes(i));
  }
  EXPECT_EQ(after.results[4].status.code(), Code::kNotFound);  // removed stays removed
  EXPECT_GT(remote->Stats().retries, retries);
  EXPECT_EQ(remote->leader(), b->address());
  // The parts in flight go to the dead A first, fail, and are answered by B through CallMaster's
  // retries, in order: keys 0..3 (4 was removed).
  auto after_parts = parts->Exists(Key(0).model_fingerprint, probe);
  ASSERT_TRUE(after_parts.ok()) << after_parts.status().ToString();
  expect_probe(*after_parts, 4);
  EXPECT_EQ(parts->leader(), b->address());
  // And writes go on.
  PutAll(*remote, 10, 2);
  Read more = GetAll(*local, 10, 2);
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(more.results[i].status.ok()) << more.results[i].status.ToString();
    EXPECT_EQ(more.bufs[i], Bytes(10 + i));
  }
}

TEST_F(StoreNodeMasterTest, ADeadNodesReplicasAreNeverHandedOut) {
  MasterServer* m = AddMaster();
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->WaitUntilServing(kWaitLimit).ok());
  StoreNode* n1 = AddNode(1);
  StoreNode* n2 = AddNode(2);
  ASSERT_TRUE(n1 && n2);
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(m) == 2; }));
  auto c = NewStoreClient("", 2);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 3);

  // Node 1 dies (kill -9): once its lease expired, every read is served by node 2.
  n1->Abandon();
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(m) == 1; }));
  Read got = GetAll(*c, 0, 3);
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << got.results[i].status.ToString();
    EXPECT_EQ(got.results[i].node, NodeId(2));
    EXPECT_EQ(got.bufs[i], Bytes(i));
  }
  EXPECT_EQ(c->Stats().bad_replicas, 0u);  // never even tried node 1
  // With one node left, a 2-replica put cannot be placed: a per-item refusal, not a crash.
  std::vector<std::byte> bytes = Bytes(50);
  std::vector<PutItem> items = {PutItem{Key(50), bytes}};
  auto r = c->Put(items);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE((*r)[0].ok());
}

// Objects the master places back to back, put from and read into one registered buffer laid out
// the same way, move as fewer transfer operations than objects (transfer::Batch::coalesce), and
// every byte still round-trips and is checksummed per object.
TEST_F(StoreNodeMasterTest, BackToBackObjectsMoveAsFewerTransferOperations) {
  MasterServer* m = ServingMasterWithNode1();
  ASSERT_NE(m, nullptr);
  auto c = NewStoreClient("", 1);  // no same-host node: every byte crosses the transfer engine
  ASSERT_NE(c, nullptr);
  constexpr uint32_t kCount = 16;
  constexpr size_t kSize = 64 << 10;
  std::vector<std::byte> src(kCount * kSize), dst(kCount * kSize);
  ASSERT_TRUE(c->RegisterBuffer(src.data(), src.size()).ok());
  ASSERT_TRUE(c->RegisterBuffer(dst.data(), dst.size()).ok());
  std::vector<PutItem> puts;
  std::vector<GetItem> gets;
  for (uint32_t i = 0; i < kCount; ++i) {
    std::vector<std::byte> b = Bytes(300 + i, kSize);
    std::copy(b.begin(), b.end(), src.begin() + static_cast<ptrdiff_t>(i * kSize));
    puts.push_back(PutItem{Key(300 + i), std::span(src).subspan(i * kSize, kSize)});
    gets.push_back(GetItem{Key(300 + i), std::span(dst).subspan(i * kSize, kSize)});
  }
  const ClientStats s0 = c->Stats();
  auto put = c->Put(puts);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& st : *put) ASSERT_TRUE(st.ok()) << st.ToString();
  const ClientStats s1 = c->Stats();
  EXPECT_EQ(s1.transfer_descs - s0.transfer_descs, kCount);
  EXPECT_LT(s1.transfer_ops - s0.transfer_ops, kCount);
  auto got = c->GetInto(gets);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (uint32_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE((*got)[i].status.ok()) << (*got)[i].status.ToString();
    EXPECT_EQ((*got)[i].source, ReadSource::kRemote);
  }
  EXPECT_EQ(dst, src);
  const ClientStats s2 = c->Stats();
  EXPECT_EQ(s2.transfer_descs - s1.transfer_descs, kCount);
  EXPECT_LT(s2.transfer_ops - s1.transfer_ops, kCount);
}

// Issue 25 item 2: a JoinNode a peer forges (plaintext, or with a stolen credential) — the id of
// a registered node, the client's host name and some other file as the tier's shm path — never
// makes a client map that file or write into it: the client refuses the file (logged once,
// counted in shm_refused) and reaches the node over the network with the addresses the join gave.
TEST_F(StoreNodeMasterTest, AForgedJoinNeverMakesAClientMapAnotherFile) {
  MasterServer* m = AddMaster();
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->WaitUntilServing(kWaitLimit).ok());
  StoreNode* n1 = AddNode(1);
  ASSERT_NE(n1, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(m) == 1; }));

  // The victim: any file the client's user may write, as large as a tier file.
  const std::string victim = shm_dir_ + "/victim";
  const std::string original(kTierHeaderBytesForTest + kDram, 'v');
  {
    std::ofstream out(victim, std::ios::binary);
    out.write(original.data(), static_cast<std::streamsize>(original.size()));
  }
  v1::JoinNodeRequest forged;
  v1::NodeEndpoint* ep = forged.mutable_endpoint();
  ep->set_node(1);
  ep->set_host("forged-host");  // the client's host name
  ep->set_transfer_addr(n1->address().transfer_addr);
  ep->set_rpc_addr(n1->address().rpc_addr);
  ep->set_shm_path(victim);
  ep->set_dram_bytes(kDram);
  ep->set_incarnation(n1->address().incarnation);
  forged.mutable_dram()->set_capacity(kDram);
  forged.set_member_name("store-node-1");
  auto stub = v1::StoreMaster::NewStub(MakeChannel(m->address(), Insecure()));
  grpc::ClientContext ctx;
  v1::JoinNodeResponse joined;
  ASSERT_TRUE(stub->JoinNode(&ctx, forged, &joined).ok());  // plaintext: the master takes it

  auto c = NewStoreClient("forged-host", 1, 1);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 2);
  Read got = GetAll(*c, 0, 2);
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << got.results[i].status.ToString();
    EXPECT_EQ(got.results[i].source, ReadSource::kRemote);
    EXPECT_EQ(got.bufs[i], Bytes(i));
  }
  const ClientStats st = c->Stats();
  EXPECT_EQ(st.hits_local, 0u);
  EXPECT_EQ(st.shm_refused, 1u);  // refused once, not tried again for the same location
  std::ifstream in(victim, std::ios::binary);
  const std::string now((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(now == original) << "the client wrote into a file a forged join named";
}

TEST_F(StoreNodeMasterTest, OneClientManyThreads) {
  MasterServer* m = AddMaster();
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->WaitUntilServing(kWaitLimit).ok());
  StoreNode* n1 = AddNode(1);
  StoreNode* n2 = AddNode(2);
  ASSERT_TRUE(n1 && n2);
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(m) == 2; }));
  auto c = NewStoreClient("host-1", 2, 1);  // beside node 1: shm for node 1, network for node 2
  ASSERT_NE(c, nullptr);

  // Writers and readers of disjoint objects and an Exists prober share the client.
  constexpr uint32_t kThreads = 3, kPerThread = 4;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint32_t first = 100 * (t + 1);
      for (uint32_t round = 0; round < 3; ++round) {
        std::vector<std::vector<std::byte>> data;
        std::vector<PutItem> items;
        for (uint32_t i = 0; i < kPerThread; ++i) data.push_back(Bytes(first + i));
        for (uint32_t i = 0; i < kPerThread; ++i) items.push_back({Key(first + i), data[i]});
        auto put = c->Put(items);
        if (!put.ok()) {
          ++bad;
          continue;
        }
        for (const Status& s : *put) bad += s.ok() ? 0 : 1;
        std::vector<std::vector<std::byte>> bufs(kPerThread, std::vector<std::byte>(kObject));
        std::vector<GetItem> gets;
        for (uint32_t i = 0; i < kPerThread; ++i) gets.push_back({Key(first + i), bufs[i]});
        auto got = c->GetInto(gets);
        if (!got.ok()) {
          ++bad;
          continue;
        }
        for (uint32_t i = 0; i < kPerThread; ++i) {
          bad += ((*got)[i].status.ok() && bufs[i] == data[i]) ? 0 : 1;
        }
      }
    });
  }
  threads.emplace_back([&] {
    std::vector<kv::BlockHash> hashes;
    for (uint32_t i = 0; i < kPerThread; ++i) hashes.push_back(Key(100 + i).hash);
    for (int i = 0; i < 20; ++i) {
      auto e = c->Exists(Key(100).model_fingerprint, hashes);
      bad += e.ok() && e->found.size() == kPerThread ? 0 : 1;
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  const ClientStats st = c->Stats();
  EXPECT_EQ(st.puts_ok, uint64_t{kThreads} * kPerThread * 3);
  EXPECT_EQ(st.hits_local + st.hits_remote, uint64_t{kThreads} * kPerThread * 3);
  EXPECT_EQ(st.misses, 0u);
  EXPECT_EQ(Objects(m), size_t{kThreads} * kPerThread);
}

// Issue 25 item 7: a node's join report goes in parts of at most join_part_replicas replicas (so
// that one message stays under the master's limit however much the node holds), and the new
// leader applies the whole report: every object the node holds is served after a failover.
TEST_F(StoreNodeMasterTest, AJoinReportInPartsReachesANewLeaderWhole) {
  MasterServer* a = AddMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->WaitUntilServing(kWaitLimit).ok());
  MasterServer* b = AddMaster();
  ASSERT_NE(b, nullptr);
  NodeOptions o = NodeOpts(1);
  o.join_part_replicas = 2;  // 7 replicas: parts of 2, 2, 2 and 1
  auto node = StoreNode::Start(o);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  nodes_.push_back(std::move(node).value());
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(a) == 1; }));
  auto c = NewStoreClient("", 1);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 7);
  ASSERT_EQ(nodes_[0]->Replicas().size(), 7u);
  a->Abandon();
  ASSERT_TRUE(b->WaitUntilServing(kWaitLimit).ok());
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(b) == 1 && Objects(b) == 7; }));
  Read got = GetAll(*c, 0, 7);
  for (uint32_t i = 0; i < 7; ++i) {
    ASSERT_TRUE(got.results[i].status.ok()) << i << ": " << got.results[i].status.ToString();
    EXPECT_EQ(got.bufs[i], Bytes(i));
  }
}

// Issue 25 item 7: a batch larger than kMaxBatchKeys is split by the client (each call stays
// under the master's limit), with the same answer as one call would give.
TEST_F(StoreNodeMasterTest, TheClientSplitsBatchesAboveTheBatchLimit) {
  MasterServer* m = ServingMasterWithNode1();
  ASSERT_NE(m, nullptr);
  auto c = NewStoreClient("", 1);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 2);
  // Distinct keys that are never stored (Key(n) repeats every 256 values of n).
  auto absent = [](uint32_t i) {
    ObjectKey k = Key(0);
    k.hash.bytes.fill(0xab);
    std::memcpy(k.hash.bytes.data(), &i, sizeof i);
    return k;
  };
  // Keys 0, 1 stored, then 2 * kMaxBatchKeys + 3 absent keys, then key 0 again.
  std::vector<kv::BlockHash> hashes = {Key(0).hash, Key(1).hash};
  for (uint32_t i = 0; i < 2 * kMaxBatchKeys + 3; ++i) hashes.push_back(absent(i).hash);
  hashes.push_back(Key(0).hash);
  auto e = c->Exists(Key(0).model_fingerprint, hashes);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->found.size(), hashes.size());
  EXPECT_EQ(e->prefix_hits, 2u);
  EXPECT_TRUE(e->found.back());
  EXPECT_EQ(std::count(e->found.begin(), e->found.end(), true), 3);
  std::vector<ObjectKey> keys;
  for (uint32_t i = 0; i < kMaxBatchKeys + 1; ++i) keys.push_back(absent(i));
  keys.push_back(Key(1));
  auto removed = c->Remove(keys);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 1u);
}

// Issue 25 item 7: the master took a request of any size (a 256 MiB Exists grew it from 21 MB to
// 835 MB) and the store node buffered one whole before refusing it. Now each refuses a request
// above its limit (store/types.h) with RESOURCE_EXHAUSTED, sent from a client process of its own,
// at a cost of at most its transport quota of memory, and goes on serving.
TEST_F(StoreNodeMasterTest, OverLimitRequestsAreRefusedWithoutTheServersGrowing) {
  MasterServer* m = AddMaster();
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->WaitUntilServing(kWaitLimit).ok());
  StoreNode* n = AddNode(1);
  ASSERT_NE(n, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(m) == 1; }));
  struct Target {
    const char* what;
    std::string address;
    const char* method;
    int field;
  };
  // The node first: both servers live in this process, and heap the master freed after a request
  // could be reused by the node's buffer, hiding the node's growth.
  const Target targets[] = {
      {"store node", n->address().rpc_addr, "/dualpath.store.v1.StoreNode/Forget", 2},
      {"store master", m->address(), "/dualpath.store.v1.StoreMaster/Exists", 2},
  };
  for (const Target& t : targets) {
    const oversize::Measured r = oversize::SendMeasured(t.what, t.address, t.method, t.field);
    EXPECT_EQ(r.call.code, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED))
        << t.what << ": " << r.call.output;
    if (oversize::kPeakIsTheServers) {
      EXPECT_LT(r.peak - r.before, oversize::kRequestBytes / 2) << t.what;
    }
  }
  // Both go on serving: a put records on the node through the master, a get reads it back.
  auto c = NewStoreClient("", 1);
  ASSERT_NE(c, nullptr);
  PutAll(*c, 0, 1);
  EXPECT_EQ(n->Replicas().size(), 1u);
  Read got = GetAll(*c, 0, 1);
  ASSERT_TRUE(got.results[0].status.ok()) << got.results[0].status.ToString();
}

}  // namespace
}  // namespace dualpath::store
