// The store's failure cases as they happen to real processes (issue 16, acceptance 4;
// docs/store.md "Failure cases"): a real etcd, two `dualpath store master` processes, store nodes
// as `dualpath store node` processes, and a StoreClient in this test. Each case kills something
// with SIGKILL (or restarts etcd) and checks what readers get afterwards: never wrong bytes; a
// dead node's replicas are never handed out; a standby takes over and serves every object on a
// live node; masters and nodes survive an etcd restart; a writer killed mid-put leaves nothing
// visible and its space returns. Issue 25: a forged Record surviving a failover is a miss, not
// another key's bytes; a second node with a live node's id is refused; a node whose etcd key is
// deleted registers again; a frozen leader's successor never answers without the live nodes'
// objects.
//
// The store runs as `cluster run --store` runs it (docs/store.md "Security"): etcd with mutual TLS,
// masters and nodes with certificates of a CA made for the test and a transfer token, none with
// --insecure; the test's own calls use the CA's client certificate.
//
// The times from the fault to the recovery are printed (and recorded as test properties) for
// docs/store.md; they are not asserted (shared machines). Waits poll a condition every 10 ms with
// a 60 s hang guard.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/splitmix.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/coord/etcd_test_server.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/store/client.h"
#include "dualpath/store/v1/store.grpc.pb.h"
#include "dualpath/transfer/token.h"
#include "store_procs.h"

namespace dualpath::store {
namespace {

namespace pb = ::dualpath::store::v1;
using Clock = std::chrono::steady_clock;
using test::Proc;
using test::ReadFile;
using test::WaitUntil;

constexpr int kTtlS = 2;  // node membership and election TTL of these clusters
constexpr uint64_t kObject = 256 * 1024;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ObjectKey Key(uint64_t i) {
  ObjectKey k;
  k.model_fingerprint = 0xFA17;
  SplitMix64 rng(i + 1);
  for (size_t w = 0; w < 4; ++w) {
    const uint64_t v = rng.Next();
    std::memcpy(k.hash.bytes.data() + 8 * w, &v, 8);
  }
  return k;
}

std::vector<std::byte> Content(uint64_t i) {
  std::vector<std::byte> out(kObject);
  SplitMix64 rng(i * 7919 + 3);
  for (size_t off = 0; off < out.size(); off += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(out.data() + off, &v, 8);
  }
  return out;
}

class StoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (coord::EtcdTestServer::Binary().empty()) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd, scripts/setup.sh): skipping";
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "dualpath_storefault_XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    cluster_ = "sf" + std::to_string(getpid());
    // The test's CA (one certificate for every master and node, etcd's, the client's) and token.
    Result<test::StoreCredentials> creds = test::StoreCredentials::Create(dir_);
    ASSERT_TRUE(creds.ok()) << creds.status().ToString();
    creds_ = *creds;
    tls_ = creds_.client;
    token_ = creds_.token;
    etcd_.UseTls(creds_.EtcdFiles(), tls_);
    ASSERT_TRUE(etcd_.Start().ok());
  }

  void TearDown() override {
    client_.reset();
    etcd_client_.reset();
    nodes_.clear();
    masters_.clear();
    etcd_.Kill();
    std::error_code ec;
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_, ec);
    for (uint32_t id = 1; id <= 4; ++id) {
      std::filesystem::remove("/dev/shm/dualpath-store-" + cluster_ + "-" + std::to_string(id), ec);
    }
  }

  // The cluster, etcd and the TLS files of `identity` ("node" or "client"): etcd is reached with
  // the --tls-* files too.
  std::vector<std::string> EtcdFlags(const std::string& identity = "client") const {
    std::vector<std::string> flags = {"--cluster", cluster_, "--etcd", etcd_.endpoint()};
    for (std::string& f : creds_.TlsFlags(identity)) flags.push_back(std::move(f));
    return flags;
  }

  // Starts a child and waits for `ready` in its log.
  std::unique_ptr<Proc> Spawn(std::vector<std::string> args, const std::string& name,
                              const std::string& ready) {
    return test::SpawnDualpath(std::move(args), dir_ + "/" + name + ".log", ready);
  }

  void StartMaster() {
    std::vector<std::string> a = {"store", "master"};
    for (auto& f : EtcdFlags("node")) a.push_back(f);
    // No --join-grace: a new leader waits for the listed nodes as long as their leases say.
    for (const char* f : {"--listen", "127.0.0.1:0", "--election-ttl", "2", "--put-timeout", "3",
                          "--pin-ttl", "5"}) {
      a.push_back(f);
    }
    masters_.push_back(Spawn(a, "master" + std::to_string(masters_.size()), "listening on"));
  }

  std::vector<std::string> NodeArgs(uint32_t id, int dram_mib) const {
    std::vector<std::string> a = {"store", "node"};
    for (auto& f : EtcdFlags("node")) a.push_back(f);
    const std::string sid = std::to_string(id);
    for (const std::string& f :
         {std::string("--id"), sid, std::string("--host"), "node" + sid, std::string("--dram-mib"),
          std::to_string(dram_mib), std::string("--rpc-listen"), std::string("127.0.0.1:0"),
          std::string("--transfer-token-file"), token_, std::string("--ttl"),
          std::to_string(kTtlS)}) {
      a.push_back(f);
    }
    return a;
  }

  void StartNode(uint32_t id, int dram_mib = 16) {
    nodes_[id] = Spawn(NodeArgs(id, dram_mib), "node" + std::to_string(id),
                       "store node " + std::to_string(id) + ":");
  }

  // The address a master process serves on (from its log).
  static std::string MasterAddress(const Proc& m) {
    const std::string log = ReadFile(m.log);
    const size_t at = log.find("listening on ");
    if (at == std::string::npos) return "";
    return log.substr(at + 13, log.find('\n', at) - at - 13);
  }

  // The etcd client of the test (made once).
  coord::EtcdClient& Etcd() {
    if (etcd_client_ == nullptr) {
      coord::EtcdOptions o = etcd_.ClientOptions();
      o.rpc_timeout = 2 * kNanosPerSecond;
      auto c = coord::EtcdClient::Connect(o);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      etcd_client_ = std::move(c).value();
    }
    return *etcd_client_;
  }

  // The master that says it leads (Stats), or nullopt.
  std::optional<std::string> LeaderAddress() {
    for (const auto& m : masters_) {
      if (m == nullptr || !m->Alive() || m->frozen) continue;
      const std::string addr = MasterAddress(*m);
      if (addr.empty()) continue;
      auto stub = pb::StoreMaster::NewStub(MakeChannel(addr, tls_));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      pb::StatsResponse st;
      if (stub->Stats(&ctx, pb::StatsRequest(), &st).ok() && st.leader()) return addr;
    }
    return std::nullopt;
  }

  // etcd has the leader key and both nodes' registrations (what a restarted or wiped etcd must
  // get back from the running processes).
  bool EtcdHasLeaderAndNodes(size_t nodes) {
    auto leader = Etcd().Get("/dualpath/" + cluster_ + "/leader");
    auto listed = Etcd().Range("/dualpath/" + cluster_ + "/nodes/");
    return leader.ok() && leader->has_value() && listed.ok() && listed->kvs.size() == nodes;
  }

  pb::StatsResponse LeaderStats() {
    pb::StatsResponse st;
    std::optional<std::string> addr = LeaderAddress();
    if (!addr) return st;
    auto stub = pb::StoreMaster::NewStub(MakeChannel(*addr, tls_));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    (void)stub->Stats(&ctx, pb::StatsRequest(), &st);
    return st;
  }

  // Asks the master at `addr` for keys [first, first + n) with one raw Get (no retries) and
  // unpins at once: the gRPC status and the answer.
  grpc::Status RawGet(const std::string& addr, uint64_t first, uint64_t n, pb::GetResponse* gr) {
    auto stub = pb::StoreMaster::NewStub(MakeChannel(addr, tls_));
    pb::GetRequest g;
    for (uint64_t i = first; i < first + n; ++i) {
      pb::ObjectKey* k = g.add_keys();
      const ObjectKey key = Key(i);
      k->set_model_fingerprint(key.model_fingerprint);
      k->set_hash(reinterpret_cast<const char*>(key.hash.bytes.data()), 32);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::Status st = stub->Get(&ctx, g, gr);
    if (st.ok() && gr->pin_id() != 0) {
      pb::UnpinRequest u;
      u.set_pin_id(gr->pin_id());
      pb::UnpinResponse ur;
      grpc::ClientContext c2;
      c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      (void)stub->Unpin(&c2, u, &ur);
    }
    return st;
  }

  // Key i's object as the leader answers a Get now (found or not, size, checksum, replicas).
  std::optional<pb::ObjectInfo> Locate(uint64_t i) {
    std::optional<std::string> addr = LeaderAddress();
    if (!addr) return std::nullopt;
    pb::GetResponse gr;
    if (!RawGet(*addr, i, 1, &gr).ok()) return std::nullopt;
    return gr.objects(0);
  }

  // The nodes holding key i's replicas, as the leader answers a Get now (unpinned at once).
  std::vector<uint32_t> ReplicaNodes(uint64_t i) {
    std::vector<uint32_t> out;
    if (std::optional<pb::ObjectInfo> o = Locate(i)) {
      for (const auto& r : o->replicas()) out.push_back(r.node());
    }
    return out;
  }

  // The master process that leads now, or nullptr.
  Proc* LeaderProc() {
    std::optional<std::string> leader = LeaderAddress();
    if (!leader) return nullptr;
    for (auto& m : masters_) {
      if (m != nullptr && MasterAddress(*m) == *leader) return m.get();
    }
    return nullptr;
  }

  ClientOptions BaseClientOptions() {
    ClientOptions o;
    o.cluster = cluster_;
    o.etcd = etcd_.ClientOptions();
    o.etcd.rpc_timeout = 5 * kNanosPerSecond;
    o.master_tls = tls_;
    Result<std::string> token = transfer::ReadTransferToken(token_);
    EXPECT_TRUE(token.ok()) << token.status().ToString();
    o.transfer.token = token.ok() ? *token : "";
    o.host = "test-client";  // no node shares this host: every byte crosses the network
    return o;
  }

  StoreClient& Client() {
    if (client_ == nullptr) {
      ClientOptions o = BaseClientOptions();
      o.retry_deadline = 30 * kNanosPerSecond;
      auto c = StoreClient::Create(o);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      client_ = std::move(c).value();
    }
    return *client_;
  }

  // A client set up as the engines set theirs (src/engine/kv_store_link.cc): master calls retried
  // for 2 s at most (the store is a cache), the default rpc_timeout, and `skip_addr`.
  std::unique_ptr<StoreClient> EngineClient(
      std::function<bool(const std::string&)> skip_addr = {}) {
    ClientOptions o = BaseClientOptions();
    o.retry_deadline = 2 * kNanosPerSecond;
    o.skip_addr = std::move(skip_addr);
    auto c = StoreClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Puts objects [first, first + n) (one replica each); expects each stored.
  void PutObjects(uint64_t first, uint64_t n) {
    std::vector<std::vector<std::byte>> data;
    std::vector<PutItem> items;
    for (uint64_t i = first; i < first + n; ++i) data.push_back(Content(i));
    for (uint64_t i = 0; i < n; ++i) items.push_back(PutItem{Key(first + i), data[i]});
    Result<std::vector<Status>> r = Client().Put(items);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const Status& s : *r) ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Reads objects [first, first + n) (through `via`, else Client()): per object hit or miss;
  // fails the test on any wrong byte, and on a failed call unless `call_may_fail` (all misses).
  std::vector<bool> ReadObjects(uint64_t first, uint64_t n, StoreClient* via = nullptr,
                                bool call_may_fail = false) {
    std::vector<std::vector<std::byte>> bufs(n, std::vector<std::byte>(kObject));
    std::vector<GetItem> items;
    for (uint64_t i = 0; i < n; ++i) items.push_back(GetItem{Key(first + i), bufs[i]});
    Result<std::vector<ReadResult>> r = (via != nullptr ? *via : Client()).GetInto(items);
    if (!call_may_fail) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
    }
    std::vector<bool> hit(n, false);
    if (!r.ok()) return hit;
    for (uint64_t i = 0; i < n; ++i) {
      if (!(*r)[i].status.ok()) continue;
      hit[i] = true;
      EXPECT_EQ((*r)[i].size, kObject);
      EXPECT_TRUE(bufs[i] == Content(first + i)) << "WRONG BYTES served for object " << first + i;
    }
    return hit;
  }

  static size_t Count(const std::vector<bool>& v) {
    size_t n = 0;
    for (bool b : v) n += b;
    return n;
  }

  void StartCluster(int masters, std::vector<uint32_t> nodes, int dram_mib = 16) {
    for (int i = 0; i < masters; ++i) StartMaster();
    for (uint32_t id : nodes) StartNode(id, dram_mib);
    ASSERT_TRUE(WaitUntil([&] {
      pb::StatsResponse st = LeaderStats();
      return st.leader() && st.nodes() == nodes.size();
    })) << "no leader with every node joined";
  }

  coord::EtcdTestServer etcd_;
  std::unique_ptr<coord::EtcdClient> etcd_client_;  // for EtcdHasLeaderAndNodes, made once
  std::string dir_;
  std::string cluster_;
  test::StoreCredentials creds_;  // the test's CA, certificates and transfer token
  std::string token_;             // creds_.token: every node and client holds it
  GrpcTls tls_;                   // creds_.client: the test's own calls
  std::vector<std::unique_ptr<Proc>> masters_;
  std::map<uint32_t, std::unique_ptr<Proc>> nodes_;
  std::unique_ptr<StoreClient> client_;
};

TEST_F(StoreFaultTest, KilledNodeReplicasAreNeverHandedOutAndReadsAreMisses) {
  StartCluster(2, {1, 2});
  PutObjects(0, 24);
  // The objects on node 1 (one replica each: spread over both nodes by free space).
  std::vector<uint64_t> on1, on2;
  for (uint64_t i = 0; i < 24; ++i) {
    const auto nodes = ReplicaNodes(i);
    ASSERT_EQ(nodes.size(), 1u);
    (nodes[0] == 1 ? on1 : on2).push_back(i);
  }
  ASSERT_FALSE(on1.empty());
  ASSERT_FALSE(on2.empty());
  EXPECT_EQ(Count(ReadObjects(0, 24)), 24u);

  const auto t0 = Clock::now();
  nodes_[1]->Kill();
  ASSERT_TRUE(WaitUntil([&] {
    for (uint64_t i : on1) {
      for (uint32_t n : ReplicaNodes(i)) {
        if (n == 1) return false;
      }
    }
    return true;
  }));
  const double gone = SecondsSince(t0);
  std::printf(
      "store fault: node 1 killed (-9); its replicas no longer handed out after %.2f s "
      "(lease TTL %d s)\n",
      gone, kTtlS);
  RecordProperty("node_death_seconds", std::to_string(gone));
  // Its objects are misses (to be recomputed), node 2's are hits, nothing wrong.
  const std::vector<bool> hit = ReadObjects(0, 24);
  for (uint64_t i : on1) EXPECT_FALSE(hit[i]) << "object " << i << " of the dead node";
  for (uint64_t i : on2) EXPECT_TRUE(hit[i]) << "object " << i << " of the live node";
  // And no new put lands on it.
  PutObjects(100, 8);
  for (uint64_t i = 100; i < 108; ++i) EXPECT_EQ(ReplicaNodes(i), std::vector<uint32_t>{2});
}

TEST_F(StoreFaultTest, KilledLeaderStandbyServesEveryObjectOnLiveNodes) {
  StartCluster(2, {1, 2});
  PutObjects(0, 32);
  EXPECT_EQ(Count(ReadObjects(0, 32)), 32u);
  std::optional<std::string> leader = LeaderAddress();
  ASSERT_TRUE(leader.has_value());
  size_t killed = 0;
  for (auto& m : masters_) {
    if (ReadFile(m->log).find("listening on " + *leader) != std::string::npos) {
      m->Kill();
      ++killed;
    }
  }
  ASSERT_EQ(killed, 1u);
  const auto t0 = Clock::now();
  // The client retries on its own: the first read after the kill waits for the standby.
  const std::vector<bool> hit = ReadObjects(0, 32);
  const double served = SecondsSince(t0);
  std::printf(
      "store fault: leader killed (-9); the standby served all reads after %.2f s "
      "(election TTL %d s)\n",
      served, kTtlS);
  RecordProperty("leader_failover_seconds", std::to_string(served));
  EXPECT_EQ(Count(hit), 32u) << "a committed object on a live node was lost";
  EXPECT_GT(Client().Stats().retries, 0u) << "the client should have retried";
  // The new leader takes puts.
  PutObjects(200, 4);
  EXPECT_EQ(Count(ReadObjects(200, 4)), 4u);
}

TEST_F(StoreFaultTest, EtcdRestartMastersAndNodesReRegisterWithoutRestarting) {
  StartCluster(2, {1, 2});
  PutObjects(0, 8);
  std::vector<pid_t> pids;
  for (auto& m : masters_) pids.push_back(m->pid);
  for (auto& [id, n] : nodes_) pids.push_back(n->pid);

  const auto t0 = Clock::now();
  etcd_.Kill();
  ASSERT_TRUE(etcd_.Start().ok());
  // Everything is back: the leader key and both registrations in etcd, a leader with both nodes
  // joined, and puts and reads work.
  ASSERT_TRUE(WaitUntil([&] {
    if (!EtcdHasLeaderAndNodes(2)) return false;
    pb::StatsResponse st = LeaderStats();
    return st.leader() && st.nodes() == 2;
  }));
  const double back = SecondsSince(t0);
  std::printf("store fault: etcd killed and restarted; a leader with both nodes after %.2f s\n",
              back);
  RecordProperty("etcd_restart_seconds", std::to_string(back));
  PutObjects(300, 8);
  EXPECT_EQ(Count(ReadObjects(300, 8)), 8u);
  // Objects put before the restart: hits or (if the leader changed and its node had not re-joined
  // when read) misses, never wrong bytes.
  (void)ReadObjects(0, 8);

  // Again, with etcd's data gone (every lease and key lost): the masters campaign again and the
  // nodes register again under new leases, and join the new leader with their reports.
  const auto t1 = Clock::now();
  etcd_.Kill();
  ASSERT_TRUE(etcd_.WipeData().ok());
  ASSERT_TRUE(etcd_.Start().ok());
  ASSERT_TRUE(WaitUntil([&] {
    if (!EtcdHasLeaderAndNodes(2)) return false;
    pb::StatsResponse st = LeaderStats();
    return st.leader() && st.nodes() == 2;
  }));
  const double wiped = SecondsSince(t1);
  std::printf(
      "store fault: etcd restarted without its data; a leader with both nodes after "
      "%.2f s\n",
      wiped);
  RecordProperty("etcd_wipe_seconds", std::to_string(wiped));
  PutObjects(400, 8);
  EXPECT_EQ(Count(ReadObjects(400, 8)), 8u);
  // Objects the nodes reported survive the new leader.
  EXPECT_EQ(Count(ReadObjects(300, 8)), 8u);

  // The same processes, none restarted.
  size_t alive = 0;
  for (auto& m : masters_) alive += m->Alive();
  for (auto& [id, n] : nodes_) alive += n->Alive();
  EXPECT_EQ(alive, pids.size());
  for (auto& [id, n] : nodes_) {
    EXPECT_NE(ReadFile(n->log).find("store node " + std::to_string(id) + ":"), std::string::npos);
  }
}

TEST_F(StoreFaultTest, WriterKilledMidPutNeverVisibleAndSpaceReturns) {
  StartCluster(2, {1, 2}, /*dram_mib=*/256);  // no eviction before the writer is killed
  const pb::StatsResponse before = LeaderStats();
  uint64_t used_before = 0;
  for (const auto& u : before.usage()) used_before += u.dram_used();
  ASSERT_EQ(used_before, 0u);

  // A writer process: `store bench --phase put` of many 1 MiB objects; killed once the master
  // shows a put in progress.
  std::vector<std::string> a = {"store", "bench"};
  for (auto& f : EtcdFlags()) a.push_back(f);
  a.push_back("--transfer-token-file");
  a.push_back(token_);
  for (const char* f : {"--host", "writer", "--size", "1048576", "--count", "4096", "--batch", "4",
                        "--phase", "put", "--seed", "77"}) {
    a.push_back(f);
  }
  auto writer = Spawn(a, "writer", "");
  ASSERT_NE(writer, nullptr);
  // Freeze the writer (SIGSTOP) when the master shows a put of it in progress; if the put is
  // still pending with the writer frozen, kill it there, else let it go on and try again.
  pb::StatsResponse at_kill;
  ASSERT_TRUE(WaitUntil([&] {
    if (LeaderStats().objects() < 8) return false;
    kill(writer->pid, SIGSTOP);
    at_kill = LeaderStats();
    if (at_kill.pending_puts() > 0) return true;
    kill(writer->pid, SIGCONT);
    return false;
  })) << "no put in progress seen:\n"
      << ReadFile(writer->log);
  writer->Kill();
  const auto t0 = Clock::now();
  const pb::StatsResponse& after_kill = at_kill;
  const uint64_t committed = after_kill.objects();
  std::printf("store fault: writer killed (-9) with %llu puts pending, %llu committed\n",
              static_cast<unsigned long long>(after_kill.pending_puts()),
              static_cast<unsigned long long>(committed));

  // The pending puts expire (--put-timeout 3) and their space returns: used == committed bytes.
  ASSERT_TRUE(WaitUntil([&] {
    pb::StatsResponse st = LeaderStats();
    uint64_t used = 0;
    for (const auto& u : st.usage()) used += u.dram_used();
    return st.pending_puts() == 0 && used == st.objects() * (1u << 20);
  }));
  const double reclaimed = SecondsSince(t0);
  std::printf(
      "store fault: the killed writer's reservations returned after %.2f s (put timeout "
      "3 s)\n",
      reclaimed);
  RecordProperty("writer_reclaim_seconds", std::to_string(reclaimed));
  const pb::StatsResponse end = LeaderStats();
  EXPECT_GE(end.expired_puts(), 1u);
  // Commits the writer sent before it died may still have landed after the first count (one
  // batch of 4); nothing else may appear: every other reservation expired.
  EXPECT_GE(end.objects(), committed);
  EXPECT_LE(end.objects(), committed + 4) << "an uncommitted put became visible";

  // Every visible object of the writer reads back exactly (the bench checks every byte).
  std::vector<std::string> r = {"store", "bench"};
  for (auto& f : EtcdFlags()) r.push_back(f);
  r.push_back("--transfer-token-file");
  r.push_back(token_);
  for (const char* f : {"--host", "reader", "--size", "1048576", "--count", "4096", "--batch", "16",
                        "--phase", "get", "--seed", "77"}) {
    r.push_back(f);
  }
  auto reader = Spawn(r, "reader", "get: ");
  ASSERT_NE(reader, nullptr);
  const std::string out = ReadFile(reader->log);
  EXPECT_NE(out.find("wrong 0"), std::string::npos) << out;
  EXPECT_NE(out.find("hits " + std::to_string(end.objects()) + " "), std::string::npos) << out;
}

// ---- issue 25: keys bound to their bytes, node identity, failover without a blind window ----

// Item 2's reproduction: one unauthenticated StoreNode.Record on the node holding key A, pointing
// key B at A's offset, size and checksum, then a failover (the standby rebuilds from the nodes'
// reports, which now name B there). A reader of B gets a miss and a counted rejection, never A's
// bytes as B's (before the key-bound checksum: A's bytes served as B's, "wrong 1").
TEST_F(StoreFaultTest, AForgedRecordSurvivingAFailoverIsAMissNeverAnotherKeysBytes) {
  StartCluster(2, {1, 2});
  PutObjects(0, 1);
  std::optional<pb::ObjectInfo> a = Locate(0);
  ASSERT_TRUE(a && a->found() && a->replicas_size() == 1);
  const uint32_t node = a->replicas(0).node();
  // The node's StoreNode address is its etcd registration's value.
  auto reg = Etcd().Get("/dualpath/" + cluster_ + "/nodes/store-node-" + std::to_string(node));
  ASSERT_TRUE(reg.ok() && reg->has_value());
  // With TLS on, only a holder of a certificate of the store's CA gets this far (store_auth_test
  // shows everyone else refused at the handshake); such a holder is trusted alike (no roles,
  // docs/store.md "Security"), so the checksum's key binding is what stops the forgery here.
  auto stub = pb::StoreNode::NewStub(MakeChannel((*reg)->value, tls_));
  pb::RecordRequest rec;
  rec.set_leader_id("forged");
  pb::ReportedReplica* r = rec.add_replicas();
  const ObjectKey b = Key(1);
  r->mutable_key()->set_model_fingerprint(b.model_fingerprint);
  r->mutable_key()->set_hash(reinterpret_cast<const char*>(b.hash.bytes.data()), 32);
  r->set_tier(pb::TIER_DRAM);
  r->set_offset(a->replicas(0).offset());
  r->set_size(a->size());
  r->set_checksum(a->checksum());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pb::RecordResponse rr;
  ASSERT_TRUE(stub->Record(&ctx, rec, &rr).ok());  // the CA's client certificate: accepted

  Proc* leader = LeaderProc();
  ASSERT_NE(leader, nullptr);
  leader->Kill();
  // The new leader rebuilt B from the node's report.
  ASSERT_TRUE(WaitUntil([&] {
    std::optional<pb::ObjectInfo> o = Locate(1);
    return o.has_value() && o->found();
  })) << "the standby never named key 1";
  const std::vector<bool> hit = ReadObjects(1, 1);  // a wrong byte fails the test
  EXPECT_FALSE(hit[0]) << "key 1 was served (with key 0's bytes)";
  EXPECT_GE(Client().Stats().rejected, 1u);
}

// Item 5: a second `store node` with the id a live node holds (its own shm directory, so the tier
// file's lock does not stop it) is refused; the first node keeps its slot and its objects (before:
// the duplicate took the slot and the first node's objects vanished).
TEST_F(StoreFaultTest, ASecondNodeWithALiveNodesIdIsRefused) {
  StartCluster(2, {1, 2});
  PutObjects(0, 60);
  size_t on1 = 0;
  for (uint64_t i = 0; i < 60; ++i) on1 += ReplicaNodes(i) == std::vector<uint32_t>{1};
  ASSERT_GT(on1, 0u);

  const std::string dup_dir = dir_ + "/dup";
  ASSERT_TRUE(std::filesystem::create_directories(dup_dir));
  std::vector<std::string> args = NodeArgs(1, 16);
  args.insert(args.end(), {"--shm-dir", dup_dir});
  const auto t0 = Clock::now();
  std::unique_ptr<Proc> dup = test::SpawnDualpath(args, dir_ + "/dup.log", "");
  ASSERT_NE(dup, nullptr);
  ASSERT_TRUE(WaitUntil([&] {
    return !dup->Alive() || ReadFile(dup->log).find("store node 1:") != std::string::npos;
  }));
  const double refused = SecondsSince(t0);
  ASSERT_FALSE(dup->Alive()) << "the duplicate node 1 is running:\n" << ReadFile(dup->log);
  EXPECT_NE(dup->ExitCode(), 0);
  EXPECT_NE(ReadFile(dup->log).find("held by a live registration"), std::string::npos)
      << ReadFile(dup->log);
  std::printf("store fault: a second node 1 refused after %.2f s (lease TTL %d s)\n", refused,
              kTtlS);
  RecordProperty("duplicate_refused_seconds", std::to_string(refused));
  // The first node 1 is untouched: listed, joined, and every object reads back.
  EXPECT_EQ(LeaderStats().nodes(), 2u);
  EXPECT_EQ(Count(ReadObjects(0, 60)), 60u);
  auto reg = Etcd().Get("/dualpath/" + cluster_ + "/nodes/store-node-1");
  ASSERT_TRUE(reg.ok() && reg->has_value());
  EXPECT_NE(ReadFile(nodes_[1]->log).find((*reg)->value), std::string::npos)
      << "the registration is not the first node's";
}

// Item 5: a node whose etcd key is deleted while its lease lives registers again by itself (its
// watch of its key) and joins again with its report (before: it retried "register first"
// forever and the leader showed it gone).
TEST_F(StoreFaultTest, ANodeWhoseRegistrationIsDeletedRegistersAgain) {
  StartCluster(1, {1, 2});
  PutObjects(0, 16);
  const std::string key = "/dualpath/" + cluster_ + "/nodes/store-node-1";
  const auto t0 = Clock::now();
  ASSERT_TRUE(Etcd().Delete(key).ok());
  ASSERT_TRUE(WaitUntil([&] {
    auto reg = Etcd().Get(key);
    if (!reg.ok() || !reg->has_value()) return false;
    pb::StatsResponse st = LeaderStats();
    uint64_t replicas = 0;
    for (const auto& u : st.usage()) replicas += u.dram_replicas();
    return st.nodes() == 2 && replicas == 16;
  })) << "node 1 did not register and join again:\n"
      << ReadFile(nodes_[1]->log);
  const double back = SecondsSince(t0);
  std::printf("store fault: node 1's etcd key deleted; registered and joined again after %.2f s\n",
              back);
  RecordProperty("deleted_registration_seconds", std::to_string(back));
  EXPECT_EQ(Count(ReadObjects(0, 16)), 16u);
}

// Item 6: the leader freezes (SIGSTOP: its connections stay open, nothing answers) and the
// standby takes over once the leader lease expired. From the moment the standby leads, every
// answer it gives a reader finds every object on the live nodes: until the nodes have joined it
// refuses with UNAVAILABLE ("rebuilding", clients retry), never an empty map (before: the nodes
// were stuck for up to 5 s asking the frozen leader, and the 2 s join grace ran out first).
TEST_F(StoreFaultTest, AFrozenLeadersSuccessorNeverAnswersWithoutTheLiveNodesObjects) {
  StartCluster(2, {1, 2});
  PutObjects(0, 32);
  Proc* leader = LeaderProc();
  ASSERT_NE(leader, nullptr);
  Proc* standby = nullptr;
  for (auto& m : masters_) {
    if (m.get() != leader) standby = m.get();
  }
  ASSERT_NE(standby, nullptr);
  const std::string b = MasterAddress(*standby);
  ASSERT_FALSE(b.empty());

  ASSERT_EQ(kill(leader->pid, SIGSTOP), 0);
  leader->frozen = true;
  const auto t0 = Clock::now();
  double leading = -1, served = -1;
  uint64_t rebuilding = 0, found = 0;
  ASSERT_TRUE(WaitUntil([&] {
    pb::GetResponse gr;
    const grpc::Status st = RawGet(b, 0, 32, &gr);
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {  // leading, rebuilding
      if (leading < 0) leading = SecondsSince(t0);
      ++rebuilding;
      return false;
    }
    if (!st.ok()) return false;  // not the leader yet
    served = SecondsSince(t0);
    for (const auto& o : gr.objects()) found += o.found();
    return true;
  }));
  std::printf(
      "store fault: leader frozen (SIGSTOP); the standby answered 'rebuilding' from %.2f s "
      "(%llu probes) and served from %.2f s, finding %llu of 32 objects (TTL %d s)\n",
      leading, static_cast<unsigned long long>(rebuilding), served,
      static_cast<unsigned long long>(found), kTtlS);
  RecordProperty("frozen_leader_rebuilding_from_seconds", std::to_string(leading));
  RecordProperty("frozen_leader_served_seconds", std::to_string(served));
  EXPECT_EQ(found, 32u) << "the new leader answered without the live nodes' objects";
  leader->Kill();  // SIGKILL ends a stopped process too
  EXPECT_EQ(Count(ReadObjects(0, 32)), 32u);
}

// Issue 25 item 9 (docs/faults.md "Partitions"): the leader stops answering (SIGSTOP here; on
// the testbed its node's compute link went down) and the standby takes over. A client whose calls
// retry for 2 s (the engines') finds the successor within a call or two. Before, each try waited
// out rpc_timeout (5 s), longer than the whole call may retry, so the call gave up without
// looking in etcd, and every later call asked the same silent leader again: the engines read
// nothing from the store until the old leader answered again (the partition's end).
TEST_F(StoreFaultTest, AClientOfALeaderThatStopsAnsweringFindsItsSuccessor) {
  StartCluster(2, {1, 2});
  PutObjects(0, 8);
  std::unique_ptr<StoreClient> c = EngineClient();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(Count(ReadObjects(0, 8, c.get())), 8u);  // the client has the leader cached now
  Proc* leader = LeaderProc();
  ASSERT_NE(leader, nullptr);
  ASSERT_EQ(c->leader(), MasterAddress(*leader));
  Proc* standby = nullptr;
  for (auto& m : masters_) {
    if (m.get() != leader) standby = m.get();
  }
  ASSERT_NE(standby, nullptr);
  const std::string b = MasterAddress(*standby);

  ASSERT_EQ(kill(leader->pid, SIGSTOP), 0);
  leader->frozen = true;
  const auto t0 = Clock::now();
  ASSERT_TRUE(WaitUntil([&] {
    pb::GetResponse gr;
    return RawGet(b, 0, 8, &gr).ok();
  })) << "the standby never served";
  const double successor = SecondsSince(t0);
  const auto t1 = Clock::now();
  int calls = 0;
  size_t hits = 0;
  while (calls < 3 && hits < 8) {
    hits = Count(ReadObjects(0, 8, c.get(), /*call_may_fail=*/true));
    ++calls;
  }
  const double found = SecondsSince(t1);
  std::printf(
      "store fault: leader frozen (SIGSTOP); the successor served after %.2f s; the engine-like "
      "client read %zu of 8 objects from it in %d calls, %.2f s\n",
      successor, hits, calls, found);
  RecordProperty("silent_leader_client_calls", std::to_string(calls));
  RecordProperty("silent_leader_client_seconds", std::to_string(found));
  EXPECT_EQ(hits, 8u) << "the client kept asking the silent leader";
  EXPECT_EQ(c->leader(), b);
  leader->Kill();  // SIGKILL ends a stopped process too
}

// A leader on a host the caller knows unreachable (ClientOptions::skip_addr, set by an engine
// that let go of that host) is not asked: the call fails at once, kUnavailable, without retries;
// once etcd names a successor, the successor is asked.
TEST_F(StoreFaultTest, ALeaderTheCallerSkipsIsNotAskedAndItsSuccessorIs) {
  StartCluster(2, {1, 2});
  PutObjects(0, 4);
  Proc* leader = LeaderProc();
  ASSERT_NE(leader, nullptr);
  const std::string a = MasterAddress(*leader);
  ASSERT_FALSE(a.empty());
  std::unique_ptr<StoreClient> c = EngineClient([a](const std::string& addr) { return addr == a; });
  ASSERT_NE(c, nullptr);

  std::vector<std::byte> buf(kObject);
  const GetItem item{Key(0), buf};
  Result<std::vector<ReadResult>> r = c->GetInto(std::span<const GetItem>(&item, 1));
  ASSERT_FALSE(r.ok()) << "the skipped leader was asked";
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("unreachable"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(c->Stats().retries, 0u);

  // The leader goes; the standby leads once its lease ran out, and the client reads from it.
  leader->Kill();
  ASSERT_TRUE(WaitUntil([&] {
    Proc* now = LeaderProc();
    return now != nullptr && MasterAddress(*now) != a;
  })) << "no successor";
  size_t hits = 0;
  ASSERT_TRUE(WaitUntil([&] {  // the successor answers "rebuilding" until the nodes joined
    hits = Count(ReadObjects(0, 4, c.get(), /*call_may_fail=*/true));
    return hits == 4;
  })) << hits
      << " of 4 objects read from the successor";
  EXPECT_NE(c->leader(), a);
}

}  // namespace
}  // namespace dualpath::store
