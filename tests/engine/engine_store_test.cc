// Engines through the distributed KV store (issue 16, docs/store.md "In the system"), in one
// process with the store's real pieces: a real etcd (dualpath/coord/etcd_test_server.h; skipped,
// saying so, when Debian's etcd is not installed), a real MasterServer, two real StoreNodes (host
// "p0" and "d0") and a prefill and a decode Engine whose persistent tiers are separate directories
// (node-local tiers: the PE never sees the DE's block files). The engines connect to the store
// themselves (EngineOptions::kv_store_etcd, the real StoreClient underneath); a LocalScheduler
// double hands out assignments, with hits computed as the service's probe does (Exists on the
// master). Outputs are compared bit-for-bit with model::Reference.
//
// What is checked: a block missing in the PE's own tier is loaded from the store (every hit token
// loaded, nothing read from the PE's tier); a store object whose bytes were damaged in a node's
// DRAM, and a well-formed store object holding another block, are both misses: the engine
// recomputes from that block, the outputs stay the reference's, and the link counts the second as
// rejected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/coord/etcd_test_server.h"
#include "dualpath/engine/engine.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/store/client.h"
#include "dualpath/store/master_server.h"
#include "dualpath/store/node.h"
#include "dualpath/store/v1/store.grpc.pb.h"
#include "engine/kv_store_link.h"
#include "engine/local_scheduler.h"

namespace dualpath::engine {
namespace {

namespace v1c = control::v1;

constexpr char kSpec[] = "layers=3,q_heads=4,kv_heads=2,head_dim=16,ffn_dim=64,vocab=512,seed=7";
constexpr uint32_t kBt = 16;
constexpr char kCluster[] = "enginestore";
constexpr std::chrono::milliseconds kGuard(60'000);  // a hang guard, not a timing assertion

GrpcTls Insecure() {
  GrpcTls t;
  t.insecure = true;
  return t;
}

// Polls `done` every 10 ms until it holds or the hang guard passed.
bool WaitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kGuard;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class EngineStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (coord::EtcdTestServer::Binary().empty()) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd from Debian's etcd-server): skipping";
    }
    ASSERT_TRUE(etcd_.Start().ok());
    char tmpl[] = "/tmp/dualpath_engine_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ + "/shm");
    auto cfg = model::RefModelConfig::Parse(kSpec);
    ASSERT_TRUE(cfg.ok());
    config_ = *cfg;
    auto m = model::RefModel::Create(config_);
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    fingerprint_ = kv::ModelFingerprint(config_.Geometry());
    shape_ = kv::BlockShape::For(config_.Geometry(), kBt);
    auto h = kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, "0", kBt);
    ASSERT_TRUE(h.ok());
    hasher_ = std::make_unique<kv::BlockHasher>(*h);

    store::MasterServerOptions mo;
    mo.cluster = kCluster;
    mo.etcd = Etcd();
    mo.listen = "127.0.0.1:0";
    mo.tls = Insecure();
    mo.node_tls = Insecure();
    mo.election_ttl = 2 * kNanosPerSecond;
    auto master = store::MasterServer::Start(mo);
    ASSERT_TRUE(master.ok()) << master.status().ToString();
    master_ = std::move(master).value();
    for (uint32_t id : {1u, 2u}) {
      store::NodeOptions no;
      no.cluster = kCluster;
      no.etcd = Etcd();
      no.id = NodeId(id);
      no.host = id == 1 ? "p0" : "d0";
      no.dram_bytes = 64ull << 20;
      no.shm_dir = root_ + "/shm";
      no.transfer.ucx_tls = "tcp";
      no.rpc_tls = Insecure();
      no.master_tls = Insecure();
      no.leader_poll = 200 * kNanosPerMilli;
      auto node = store::StoreNode::Start(no);
      ASSERT_TRUE(node.ok()) << node.status().ToString();
      nodes_.push_back(std::move(node).value());
    }
    ASSERT_TRUE(master_->WaitUntilServing(60 * kNanosPerSecond).ok());
    ASSERT_TRUE(WaitUntil([&] {
      std::optional<store::MasterStats> s = master_->Stats();
      return s && s->nodes == 2;
    })) << "the store nodes did not join";

    store::ClientOptions co;
    co.cluster = kCluster;
    co.etcd = Etcd();
    co.master_tls = Insecure();
    co.host = "test";
    co.transfer.ucx_tls = "tcp";
    auto client = store::StoreClient::Create(co);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();

    pe_ = StartEngine(Role::kPrefill, "p0.0");
    de_ = StartEngine(Role::kDecode, "d0.0");
  }

  void TearDown() override {
    sched_.Shutdown();
    for (auto& t : threads_) t.join();
    pe_.reset();
    de_.reset();
    client_.reset();
    nodes_.clear();
    master_.reset();
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }

  coord::EtcdOptions Etcd() {
    coord::EtcdOptions o;
    o.endpoints = etcd_.endpoint();
    o.tls.insecure = true;
    return o;
  }

  std::unique_ptr<Engine> StartEngine(Role role, const std::string& name) {
    EngineOptions o;
    o.role = role;
    o.name = name;
    o.node = name.substr(0, 2);
    o.listen_ip = "127.0.0.1";
    o.tls.insecure = true;
    o.store_root = root_;
    o.store_subdir = "tier-" + o.node;  // node-local: each engine its own directory
    o.buffer_bytes = 16 << 20;
    o.ucx_tls = "tcp";
    o.fetch_wait_ms = 50;
    o.request_timeout = 30 * kNanosPerSecond;
    o.kv_store_etcd = etcd_.endpoint();
    o.kv_store_cluster = kCluster;
    o.kv_store_tls.insecure = true;       // the in-process store above runs plaintext on loopback
    o.kv_store_shm_dir = root_ + "/shm";  // where the test's store nodes keep their tier files
    o.kv_store_stats_path = root_ + "/" + name + ".stats.json";
    o.result_after_write = true;  // turn 2 probes the store for what turn 1's DE wrote
    auto e = Engine::Create(o, sched_.Link());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) return nullptr;
    Engine* raw = e->get();
    threads_.emplace_back([raw] { EXPECT_TRUE(raw->Run().ok()); });
    return std::move(e).value();
  }

  std::vector<kv::BlockHash> Hashes(const v1c::RequestSpec& s) {
    std::vector<uint32_t> prompt(s.prompt().begin(), s.prompt().end());
    return hasher_->HashPrefix(prompt);
  }

  // What the service's probe finds with --store: the leading blocks the master has, capped at
  // prompt - 1 and rounded down to whole blocks.
  int64_t StoreHitTokens(const v1c::RequestSpec& s) {
    std::vector<kv::BlockHash> hashes = Hashes(s);
    auto r = client_->Exists(fingerprint_, hashes);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return 0;
    const int64_t hit = static_cast<int64_t>(r->prefix_hits) * kBt;
    return std::min<int64_t>(hit, s.prompt_size() - 1) / kBt * kBt;
  }

  v1c::RequestResult Run(const v1c::RequestSpec& s, int64_t hit) {
    sched_.Assign(pe_->engine_id(), de_->engine_id(), s, v1c::READ_SIDE_PREFILL, hit, 0);
    auto r = sched_.Wait(s.request_id(), kGuard);
    EXPECT_TRUE(r.has_value()) << "no result for request " << s.request_id();
    return r.value_or(v1c::RequestResult());
  }

  void ExpectReference(const v1c::RequestSpec& s, const v1c::RequestResult& r) {
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<uint32_t> prompt(s.prompt().begin(), s.prompt().end());
    std::vector<uint32_t> teacher(s.teacher().begin(), s.teacher().end());
    model::Generation want = model::Reference(*model_, prompt, teacher, s.gen_tokens());
    std::vector<uint32_t> got(r.generated().begin(), r.generated().end());
    EXPECT_EQ(got, want.tokens) << "request " << s.request_id();
    EXPECT_EQ(r.first_logits_digest(), want.first_logits_digest) << "request " << s.request_id();
  }

  // A turn: the previous context (prompt + outputs) plus `append` fresh tokens.
  v1c::RequestSpec NextTurn(uint64_t id, uint32_t append, uint32_t gen) {
    std::uniform_int_distribution<uint32_t> tok(0, 511);
    for (uint32_t i = 0; i < append; ++i) context_.push_back(tok(rng_));
    v1c::RequestSpec s;
    s.set_request_id(id);
    s.set_gen_tokens(gen);
    for (uint32_t t : context_) s.add_prompt(t);
    for (uint32_t i = 0; i < gen; ++i) {
      const uint32_t t = tok(rng_);
      s.add_teacher(t);
      context_.push_back(t);
    }
    return s;
  }

  // The replica of `hash` in a node's DRAM tier: (node, offset); fails the test if none.
  std::pair<store::StoreNode*, uint64_t> ReplicaOf(const kv::BlockHash& hash) {
    for (auto& n : nodes_) {
      for (const store::NodeReplica& r : n->Replicas()) {
        if (r.key.hash == hash && r.key.model_fingerprint == fingerprint_) {
          return {n.get(), r.offset};
        }
      }
    }
    ADD_FAILURE() << "no replica of the block in the store";
    return {nullptr, 0};
  }

  coord::EtcdTestServer etcd_;
  std::string root_;
  model::RefModelConfig config_;
  std::unique_ptr<model::RefModel> model_;
  uint64_t fingerprint_ = 0;
  kv::BlockShape shape_;
  std::unique_ptr<kv::BlockHasher> hasher_;
  std::unique_ptr<store::MasterServer> master_;
  std::vector<std::unique_ptr<store::StoreNode>> nodes_;
  std::unique_ptr<store::StoreClient> client_;
  LocalScheduler sched_{kSpec, kBt};
  std::vector<std::thread> threads_;
  std::unique_ptr<Engine> pe_;
  std::unique_ptr<Engine> de_;
  std::mt19937 rng_{31};
  std::vector<uint32_t> context_;
};

TEST_F(EngineStoreTest, BlocksMissingInTheOwnTierComeFromTheStoreAndBadObjectsAreRecomputed) {
  ASSERT_TRUE(pe_ && de_);
  // Turn 1: nothing stored; the DE writes its full blocks to its own tier and puts them into the
  // store (before it reports the result: the write-behind flushes first).
  v1c::RequestSpec t1 = NextTurn(1, 70, 6);
  ASSERT_EQ(StoreHitTokens(t1), 0);
  v1c::RequestResult r1 = Run(t1, 0);
  ExpectReference(t1, r1);

  // Turn 2 on the PE side: the PE's own tier is empty (node-local tiers), the store has the
  // blocks: every hit token is loaded, none of it from the PE's tier.
  v1c::RequestSpec t2 = NextTurn(2, 20, 6);
  const int64_t hit2 = StoreHitTokens(t2);
  ASSERT_GE(hit2, 4 * kBt) << "the DE's blocks did not reach the store";
  storage::StoreOptions so;
  so.root = root_ + "/tier-p0";
  so.model_fingerprint = fingerprint_;
  auto pe_tier = storage::BlockStore::Open(so);
  ASSERT_TRUE(pe_tier.ok());
  EXPECT_FALSE((*pe_tier)->Contains(Hashes(t2)[0])) << "the PE's tier should not have the block";
  v1c::RequestResult r2 = Run(t2, hit2);
  ExpectReference(t2, r2);
  EXPECT_EQ(r2.loaded_tokens(), hit2);
  EXPECT_EQ(r2.read_bytes_prefill(), 0) << "nothing may come from the PE's own (empty) tier";

  // Turn 3: put a well-formed object holding another block (block 0's file) under block 1's key
  // (the store's checksum is right: only the engine's block-file verification catches it), and
  // damage block 2's bytes in the node's DRAM (the store's checksum catches that one). The PE
  // loads block 0 and recomputes from block 1; had it taken the foreign object, it would have
  // loaded 2 blocks and the outputs would differ from the reference.
  v1c::RequestSpec t3 = NextTurn(3, 20, 6);
  const std::vector<kv::BlockHash> h3 = Hashes(t3);
  const int64_t hit3 = StoreHitTokens(t3);
  ASSERT_GE(hit3, 3 * kBt);
  auto [node, offset] = ReplicaOf(h3[2]);
  ASSERT_NE(node, nullptr);
  node->dram_base()[offset + kv::kBlockFileHeaderBytes + 100] ^= 0x5A;

  const uint64_t file_bytes = storage::BlockStore::FileBytes(shape_);
  std::vector<std::byte> foreign(file_bytes);
  {
    auto [other_node, other_offset] = ReplicaOf(h3[0]);
    ASSERT_NE(other_node, nullptr);
    std::memcpy(foreign.data(), other_node->dram_base() + other_offset, file_bytes);
  }
  const store::ObjectKey key1{fingerprint_, h3[1]};
  auto removed = client_->Remove(std::span<const store::ObjectKey>(&key1, 1));
  ASSERT_TRUE(removed.ok());
  ASSERT_EQ(*removed, 1u);
  const store::PutItem item{key1, foreign};
  auto put = client_->Put(std::span<const store::PutItem>(&item, 1));
  ASSERT_TRUE(put.ok() && (*put)[0].ok());

  v1c::RequestResult r3 = Run(t3, hit3);
  ExpectReference(t3, r3);  // wrong KV never reached the model
  EXPECT_EQ(r3.loaded_tokens(), kBt) << "only block 0 verifies";

  // The PE's store link counted both: block 1 rejected by the engine's verification, block 2 a
  // miss (its only replica failed the store's checksum). Stop writes the counters.
  pe_->Stop();
  std::ifstream in(root_ + "/p0.0.stats.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string stats = ss.str();
  EXPECT_NE(stats.find("\"rejected\":1,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"misses\":1,"), std::string::npos) << stats;
  EXPECT_EQ(stats.find("\"hits_local\":0,\"hits_remote\":0,"), std::string::npos)
      << "turn 2's hits were counted: " << stats;
}

// Two engines writing the same block at once (a prefix agents share): the second put finds the
// first one pending on the master (kStorePutPending). That is not a failed put: equal keys mean
// equal bytes, and the block is there once the other put commits. It is counted apart, so
// `cluster run --store`'s "0 failed puts" check does not fail on a race of two healthy writers.
TEST_F(EngineStoreTest, ABlockAnotherWriterIsPuttingCountsAsPendingNotFailed) {
  kv::BlockHash hash;
  for (size_t i = 0; i < hash.bytes.size(); ++i) hash.bytes[i] = static_cast<uint8_t>(0xa0 + i);
  constexpr uint64_t kBytes = 4096;

  // The other writer: a put started on the leader and not committed.
  auto stub = store::v1::StoreMaster::NewStub(MakeChannel(master_->address(), Insecure()));
  store::v1::PutStartRequest ps;
  store::v1::PutItem* item = ps.add_items();
  item->mutable_key()->set_model_fingerprint(fingerprint_);
  item->mutable_key()->set_hash(
      std::string(reinterpret_cast<const char*>(hash.bytes.data()), hash.bytes.size()));
  item->set_size(kBytes);
  store::v1::PutStartResponse started;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kGuard);
  ASSERT_TRUE(stub->PutStart(&ctx, ps, &started).ok());
  ASSERT_EQ(started.tickets_size(), 1);
  ASSERT_EQ(started.tickets(0).code(), 0) << started.tickets(0).message();

  StoreLinkOptions lo;
  lo.etcd = etcd_.endpoint();
  lo.cluster = kCluster;
  lo.host = "test";
  lo.shm_dir = root_ + "/shm";
  lo.tls.insecure = true;
  lo.model_fingerprint = fingerprint_;
  auto link = MakeStoreLink(lo);
  ASSERT_TRUE(link.ok()) << link.status().ToString();

  storage::EncodedBlock block{hash, storage::AlignedBuffer(kBytes), kBytes};
  std::memset(block.file.data(), 0x5a, kBytes);
  const Status written = Status::Ok();
  (*link)->Put(std::span<const storage::EncodedBlock>(&block, 1),
               std::span<const Status>(&written, 1));
  const KvStoreStats s = (*link)->Stats();
  EXPECT_EQ(s.puts_pending, 1u);
  EXPECT_EQ(s.puts_failed, 0u);
  EXPECT_EQ(s.puts_ok, 0u);
}

}  // namespace
}  // namespace dualpath::engine
