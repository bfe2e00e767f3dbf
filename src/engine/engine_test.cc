// In-process end-to-end tests of the engine runtime: one prefill and one decode Engine (real
// transfer engines over loopback UCX tcp, real EnginePeer gRPC, a real BlockStore in a temp dir),
// driven by a test double of the scheduler service that hands out Assignments and collects
// results. Outputs are compared bit-for-bit with model::Reference.
#include "dualpath/engine/engine.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_tls_pki.h"
#include "dualpath/common/metrics.h"
#include "dualpath/engine/v1/engine.grpc.pb.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/pool/pool.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/storage/layout.h"
#include "engine/context.h"
#include "engine/decode.h"
#include "engine/local_scheduler.h"
#include "engine/rack_test_util.h"

namespace dualpath::engine {
namespace {

namespace v1c = control::v1;

constexpr char kSpec[] = "layers=3,q_heads=4,kv_heads=2,head_dim=16,ffn_dim=64,vocab=512,seed=7";
constexpr uint32_t kBt = 16;
constexpr std::chrono::milliseconds kGuard(60'000);  // a hang guard, not a timing assertion

// One agent's turns: each prompt is the previous context plus the recorded output plus an
// append of fresh tokens (trace::PromptTokenIds' shape), with seeded random token ids.
class Agent {
 public:
  explicit Agent(uint32_t seed) : rng_(seed) {}
  v1c::RequestSpec NextTurn(uint64_t id, uint32_t append, uint32_t gen) {
    std::uniform_int_distribution<uint32_t> tok(0, 511);
    for (uint32_t i = 0; i < append; ++i) {
      context_.push_back(tok(rng_));
    }
    v1c::RequestSpec s;
    s.set_request_id(id);
    s.set_gen_tokens(gen);
    for (uint32_t t : context_) {
      s.add_prompt(t);
    }
    for (uint32_t i = 0; i < gen; ++i) {
      uint32_t t = tok(rng_);
      s.add_teacher(t);
      context_.push_back(t);  // the recorded output is part of the next turn's prompt
    }
    return s;
  }

 private:
  std::mt19937 rng_;
  std::vector<uint32_t> context_;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dualpath_engine_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    auto cfg = model::RefModelConfig::Parse(kSpec);
    ASSERT_TRUE(cfg.ok());
    config_ = *cfg;
    auto m = model::RefModel::Create(config_);
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    storage::StoreOptions so;
    so.root = root_ + "/sys";
    so.model_fingerprint = kv::ModelFingerprint(config_.Geometry());
    auto st = storage::BlockStore::Open(so);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    store_ = std::move(st).value();
    auto h = kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, "0", kBt);
    ASSERT_TRUE(h.ok());
    hasher_ = std::make_unique<kv::BlockHasher>(*h);
    pe_ = StartEngine(Role::kPrefill, "p0.0");
    de_ = StartEngine(Role::kDecode, "d0.0");
  }

  void TearDown() override {
    sched_.Shutdown();
    for (auto& t : threads_) {
      t.join();
    }
    pe_.reset();
    de_.reset();
    store_.reset();
    std::filesystem::remove_all(root_);
  }

  std::unique_ptr<Engine> StartEngine(Role role, const std::string& name) {
    EngineOptions o;
    o.role = role;
    o.name = name;
    o.node = name.substr(0, 2);
    o.listen_ip = "127.0.0.1";
    o.tls.insecure = true;  // unit test on loopback: plaintext EnginePeer, no transfer token
    o.store_root = root_;
    o.store_subdir = "sys";
    o.buffer_bytes = 16 << 20;
    o.ucx_tls = "tcp";
    o.fetch_wait_ms = 50;
    o.decode_batching = decode_batching_;
    o.max_decode_batch = max_decode_batch_;
    o.write_behind_bytes = write_behind_bytes_;
    o.result_after_write = result_after_write_;
    o.result_wait_blocks = result_wait_blocks_;
    o.prefill_batching = prefill_batching_;
    o.ranks = ranks_;
    o.rank_placement = rank_placement_;
    o.compute_quota = compute_quota_;
    o.batch_stats_path = role == Role::kPrefill ? root_ + "/batches.json" : "";
    o.request_timeout =
        role == Role::kDecode && de_request_timeout_ != 0 ? de_request_timeout_ : request_timeout_;
    o.faults = role == Role::kDecode ? de_faults_ : pe_faults_;
    o.peer_timeout = 5 * kNanosPerSecond;
    o.metrics = &registry_;
    o.kv_substrate =
        role == Role::kDecode ? de_kv_substrate_.value_or(kv_substrate_) : kv_substrate_;
    o.rack_pool_path = rack_path_;
    o.rack_node = role == Role::kPrefill ? 0 : 1;  // two "hosts" of the rack
    o.rack_prefix_cache = rack_prefix_cache_;
    auto e = Engine::Create(o, sched_.Link());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) {
      return nullptr;
    }
    Engine* raw = e->get();
    threads_.emplace_back([raw] { EXPECT_TRUE(raw->Run().ok()); });
    return std::move(e).value();
  }

  // The result of a request; fails the test if none arrives before the hang guard.
  v1c::RequestResult Wait(uint64_t id) {
    auto r = sched_.Wait(id, kGuard);
    EXPECT_TRUE(r.has_value()) << "no result for request " << id;
    return r.value_or(v1c::RequestResult());
  }

  // What the scheduler service computes at Submit: the longest prefix of whole blocks present in
  // storage, capped at prompt - 1.
  int64_t HitTokens(const v1c::RequestSpec& s) {
    std::vector<uint32_t> prompt(s.prompt().begin(), s.prompt().end());
    std::vector<kv::BlockHash> hashes = hasher_->HashPrefix(prompt);
    int64_t hit = 0;
    for (const auto& h : hashes) {
      if (!store_->Contains(h)) {
        break;
      }
      hit += kBt;
    }
    return std::min<int64_t>(hit, static_cast<int64_t>(prompt.size()) - 1) / kBt * kBt;
  }

  v1c::RequestResult Run(const v1c::RequestSpec& s, v1c::ReadSide side, int64_t hit,
                         int64_t prefill_read = 0) {
    sched_.Assign(pe_->engine_id(), de_->engine_id(), s, side, hit, prefill_read);
    return Wait(s.request_id());
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

  // The value of the first series of metric `name` whose labels include engine="`engine`" and
  // `also` (e.g. code="timeout"); 0 when there is none yet.
  double Series(const std::string& name, const std::string& engine, const std::string& also = "") {
    std::istringstream in(registry_.Render());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(name + "{", 0) == 0 &&
          line.find("engine=\"" + engine + "\"") != std::string::npos &&
          line.find(also) != std::string::npos) {
        return std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return 0;
  }

  // Waits (polling the engines' state, bounded by the hang guard) until `done` holds.
  bool WaitUntil(const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + kGuard;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  // Flips one payload byte of the block file of `hash`.
  void CorruptBlock(const kv::BlockHash& hash) {
    std::string path = storage::BlockPath(store_->model_dir(), hash);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekg(kv::kBlockFileHeaderBytes + 100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5A);
    f.seekp(kv::kBlockFileHeaderBytes + 100);
    f.write(&c, 1);
  }

  // Every full block a DE writes behind for `s` decoded to its end: the prompt's and those its
  // gen - 1 fed teacher tokens complete.
  std::vector<kv::BlockHash> DecodedBlocks(const v1c::RequestSpec& s) {
    std::vector<uint32_t> tokens(s.prompt().begin(), s.prompt().end());
    tokens.insert(tokens.end(), s.teacher().begin(), s.teacher().begin() + (s.gen_tokens() - 1));
    return hasher_->HashPrefix(tokens);
  }

  std::vector<kv::BlockHash> PromptHashes(const v1c::RequestSpec& s) {
    std::vector<uint32_t> prompt(s.prompt().begin(), s.prompt().end());
    return hasher_->HashPrefix(prompt);
  }

  // Set by derived fixtures before SetUp.
  Nanos request_timeout_ = 30 * kNanosPerSecond;
  Nanos de_request_timeout_ = 0;  // the DE's, when not 0 (otherwise request_timeout_)
  DecodeBatching decode_batching_ = DecodeBatching::kContinuous;
  uint32_t max_decode_batch_ = 0;
  uint64_t write_behind_bytes_ = EngineOptions{}.write_behind_bytes;
  // Most tests run turns one after another and expect each to hit what the previous one wrote.
  bool result_after_write_ = true;
  uint32_t result_wait_blocks_ = EngineOptions{}.result_wait_blocks;
  PrefillBatching prefill_batching_ = PrefillBatching::kBatched;
  uint32_t ranks_ = 2;
  sched::RankPlacement rank_placement_ = sched::RankPlacement::kPacked;
  Nanos compute_quota_ = 300 * kNanosPerMilli;
  storage::StorageFaults* de_faults_ = nullptr;
  storage::StorageFaults* pe_faults_ = nullptr;
  KvSubstrate kv_substrate_ = KvSubstrate::kUcx;
  std::optional<KvSubstrate> de_kv_substrate_;  // the DE's, when set (otherwise kv_substrate_)
  std::string rack_path_;                       // the rack pool (kRackPool)
  bool rack_prefix_cache_ = false;              // kRackPool: also the rack prefix cache

  std::string root_;
  model::RefModelConfig config_;
  std::unique_ptr<model::RefModel> model_;
  std::unique_ptr<storage::BlockStore> store_;
  std::unique_ptr<kv::BlockHasher> hasher_;
  LocalScheduler sched_{kSpec, kBt};
  metrics::Registry registry_;  // outlives the engines (their metrics unregister first)
  std::vector<std::thread> threads_;
  std::unique_ptr<Engine> pe_;
  std::unique_ptr<Engine> de_;
};

// Issue 17: an engine refuses, before starting anything, a store subdirectory that would leave
// its store root, and (without --insecure) a TCP EnginePeer listener without a certificate or a
// missing transfer token, each naming the flags.
TEST_F(EngineTest, EscapingStoreSubdirOrMissingTokenIsRefusedBeforeStart) {
  EngineOptions o;
  o.name = "p9.0";
  o.node = "p9";
  o.store_root = root_;
  o.tls.insecure = true;
  for (const std::string& bad :
       std::vector<std::string>{"..", "../elsewhere", "a/b", std::string("a\0b", 3)}) {
    o.store_subdir = bad;
    auto e = Engine::Create(o, sched_.Link());
    ASSERT_FALSE(e.ok()) << "'" << bad << "' accepted";
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument) << e.status().ToString();
    EXPECT_NE(e.status().message().find("must be one directory name"), std::string::npos);
  }
  o.store_subdir = "sys";
  o.tls.insecure = false;
  auto e = Engine::Create(o, sched_.Link());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_NE(e.status().message().find("EnginePeer: TCP listener 127.0.0.1:0 needs --tls-cert"),
            std::string::npos)
      << e.status().ToString();
  ASSERT_TRUE(WriteClusterPki(root_ + "/pki", {{"p9", {"127.0.0.1"}}}).ok());
  Result<GrpcTls> tls = LoadGrpcTls({.cert = PkiCertPath(root_ + "/pki", "p9"),
                                     .key = PkiKeyPath(root_ + "/pki", "p9"),
                                     .ca = PkiCaPath(root_ + "/pki")});
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  o.tls = *tls;
  e = Engine::Create(o, sched_.Link());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_NE(e.status().message().find("--transfer-token-file"), std::string::npos)
      << e.status().ToString();
}

TEST_F(EngineTest, EveryReadSideGivesReferenceOutputsAndTurnsHitWhatEarlierTurnsWrote) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(11);
  // Turn 1: nothing in storage; the DE writes its full blocks behind.
  v1c::RequestSpec t1 = agent.NextTurn(1, 40, 6);
  ASSERT_EQ(HitTokens(t1), 0);
  v1c::RequestResult r1 = Run(t1, v1c::READ_SIDE_PREFILL, 0);
  ExpectReference(t1, r1);
  EXPECT_EQ(r1.loaded_tokens(), 0);

  struct Case {
    v1c::ReadSide side;
    const char* name;
  };
  const Case cases[] = {{v1c::READ_SIDE_PREFILL, "prefill"},
                        {v1c::READ_SIDE_DECODE, "decode"},
                        {v1c::READ_SIDE_SPLIT, "split"},
                        {v1c::READ_SIDE_PREFILL, "prefill again"}};
  uint64_t id = 2;
  int64_t pe_bytes = 0, de_bytes = 0;  // as the results report them
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1c::RequestSpec s = agent.NextTurn(id++, 30, 6);
    int64_t hit = HitTokens(s);
    // The previous turn's prompt and fed outputs were written behind as whole blocks.
    EXPECT_GE(hit, (s.prompt_size() - 30 - 1) / kBt * kBt);
    ASSERT_GT(hit, 0);
    int64_t prefill_read = c.side == v1c::READ_SIDE_SPLIT ? hit / kBt / 2 * kBt : 0;
    v1c::RequestResult r = Run(s, c.side, hit, prefill_read);
    ExpectReference(s, r);
    EXPECT_EQ(r.hit_tokens(), hit);
    EXPECT_EQ(r.loaded_tokens(), hit);  // every hit token was really loaded, not recomputed
    EXPECT_EQ(r.side(), c.side);
    int64_t file_bytes = static_cast<int64_t>(
        storage::BlockStore::FileBytes(kv::BlockShape::For(config_.Geometry(), kBt)));
    int64_t pe_blocks = c.side == v1c::READ_SIDE_PREFILL ? hit / kBt
                        : c.side == v1c::READ_SIDE_SPLIT ? prefill_read / kBt
                                                         : 0;
    EXPECT_EQ(r.read_bytes_prefill(), pe_blocks * file_bytes);
    EXPECT_EQ(r.read_bytes_decode(), (hit / kBt - pe_blocks) * file_bytes);
    pe_bytes += r.read_bytes_prefill();
    de_bytes += r.read_bytes_decode();
    EXPECT_GT(r.timing().first_token_ns(), 0);
    EXPECT_GE(r.timing().done_ns(), r.timing().first_token_ns());
  }

  // Oracle (NONE): nothing is read; the run completes (its outputs are a timing bound only).
  v1c::RequestSpec s = agent.NextTurn(id++, 30, 4);
  v1c::RequestResult r = Run(s, v1c::READ_SIDE_NONE, HitTokens(s));
  EXPECT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.read_bytes_prefill() + r.read_bytes_decode(), 0);
  EXPECT_EQ(r.generated_size(), 4);

  // docs/metrics.md: each engine counted the bytes it read on its path, equal to what the results
  // report; the store's hits and the transfer bytes (KV pushed in the low class) were counted.
  const std::string text = registry_.Render();
  ASSERT_GT(pe_bytes, 0);
  ASSERT_GT(de_bytes, 0);
  for (const std::string& want :
       {"dualpath_engine_read_bytes_total{system=\"dualpath\",engine=\"p0.0\",node=\"p0\","
        "role=\"prefill\",path=\"pe\"} " +
            std::to_string(pe_bytes) + "\n",
        "dualpath_engine_read_bytes_total{system=\"dualpath\",engine=\"d0.0\",node=\"d0\","
        "role=\"decode\",path=\"de\"} " +
            std::to_string(de_bytes) + "\n",
        std::string("dualpath_process_info{system=\"dualpath\",kind=\"de\",name=\"d0.0\"} 1\n")}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing " << want << "in\n" << text;
  }
  EXPECT_EQ(text.find("tier=\"store\",result=\"hit\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("class=\"low\",op=\"put\"} "), std::string::npos);
  EXPECT_EQ(text.find("role=\"decode\",class=\"low\",op=\"put\"} 0\n"), std::string::npos);
}

// A counter's value in the registry's text (0 if absent).
double CounterValue(const std::string& text, const std::string& series) {
  const size_t at = text.find(series + " ");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size() + 1));
}

// Issue 29: the rack pool as the KV substrate (docs/engine.md "KV substrate"), in both memory
// models. Every read side (PE path: the PE's KV of all prompt tokens goes to the DE; DE path: the
// DE's loaded hit KV goes to the PE and the miss tokens' KV back; split) gives the reference
// outputs; no transfer batch carries a byte (the compute link sees notices only), the rack pool
// carried the KV (each side read exactly what the other wrote), and every object is deleted
// once read (the region holds no block and no pin afterwards).
class RackSubstrateTest : public EngineTest,
                          public ::testing::WithParamInterface<pool::MemoryModel> {
 protected:
  void SetUp() override {
    Status created = CreateTestRackPool("rkp-engine-test", GetParam(), 1024, 16, &rack_path_);
    ASSERT_TRUE(created.ok()) << created.ToString();
    kv_substrate_ = KvSubstrate::kRackPool;
    EngineTest::SetUp();
  }
  void TearDown() override {
    EngineTest::TearDown();
    EXPECT_TRUE(pool::Pool::Destroy(rack_path_).ok());
  }
  // Sum over every series of `name` of engine `engine` (and `also`).
  double Sum(const std::string& name, const std::string& engine, const std::string& also = "") {
    std::istringstream in(registry_.Render());
    double sum = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(name + "{", 0) == 0 &&
          line.find("engine=\"" + engine + "\"") != std::string::npos &&
          line.find(also) != std::string::npos) {
        sum += std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return sum;
  }
};

TEST_P(RackSubstrateTest, KvMovesThroughTheRackPoolWithReferenceOutputs) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(29);
  v1c::RequestSpec t1 = agent.NextTurn(1, 40, 6);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));
  uint64_t id = 2;
  for (v1c::ReadSide side : {v1c::READ_SIDE_PREFILL, v1c::READ_SIDE_DECODE, v1c::READ_SIDE_SPLIT,
                             v1c::READ_SIDE_DECODE}) {
    SCOPED_TRACE(v1c::ReadSide_Name(side));
    v1c::RequestSpec s = agent.NextTurn(id++, 30, 6);
    const int64_t hit = HitTokens(s);
    ASSERT_GT(hit, 0);
    v1c::RequestResult r =
        Run(s, side, hit, side == v1c::READ_SIDE_SPLIT ? hit / kBt / 2 * kBt : 0);
    ExpectReference(s, r);
    EXPECT_EQ(r.loaded_tokens(), hit);
  }
  // Notices alone over the compute link: no transfer batch carried a byte.
  EXPECT_EQ(Sum("dualpath_engine_transfer_bytes_total", "p0.0"), 0);
  EXPECT_EQ(Sum("dualpath_engine_transfer_bytes_total", "d0.0"), 0);
  const double pe_wrote = Sum("dualpath_engine_rack_pool_bytes_total", "p0.0", "dir=\"write\"");
  const double pe_read = Sum("dualpath_engine_rack_pool_bytes_total", "p0.0", "dir=\"read\"");
  const double de_wrote = Sum("dualpath_engine_rack_pool_bytes_total", "d0.0", "dir=\"write\"");
  const double de_read = Sum("dualpath_engine_rack_pool_bytes_total", "d0.0", "dir=\"read\"");
  EXPECT_GT(pe_wrote, 0);  // every request's miss-token KV
  EXPECT_GT(de_wrote, 0);  // the DE-path requests' hit KV
  EXPECT_EQ(pe_wrote, de_read);
  EXPECT_EQ(de_wrote, pe_read);
  // Every object is released once its reader has it (the PE's after PrefillDone, the DE's at
  // PrefillDone): the region ends with no block and no pin. The PE releases after the DE already
  // reported, so wait for it (bounded by the hang guard).
  pool::OpenOptions oo;
  oo.background_thread = false;
  oo.lock_manager = false;  // an engine holds the non-coherent manager role
  oo.node = 2;
  auto observer = pool::Pool::Open(rack_path_, oo);
  ASSERT_TRUE(observer.ok()) << observer.status().ToString();
  pool::PoolStats st;
  EXPECT_TRUE(WaitUntil([&] {
    st = (*observer)->Stats();
    return st.lock_error.empty() && st.ready_entries == 0 && st.total_pins == 0;
  })) << "ready "
      << st.ready_entries << " pins " << st.total_pins << " " << st.lock_error;
  EXPECT_EQ(st.writing_entries, 0u);
}

// Both engines of a request must move KV the same way: a DE on UCX refuses a rack-pool PE's
// request (the KV would never arrive), naming both, and the request fails instead of hanging.
class RackSubstrateMismatchTest : public RackSubstrateTest {
 protected:
  RackSubstrateMismatchTest() { de_kv_substrate_ = KvSubstrate::kUcx; }
};

TEST_P(RackSubstrateMismatchTest, DecodeEngineRefusesAnotherSubstrate) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(30);
  v1c::RequestSpec s = agent.NextTurn(1, 20, 3);
  v1c::RequestResult r = Run(s, v1c::READ_SIDE_PREFILL, 0);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("moves KV by rack-pool, this engine by ucx"), std::string::npos)
      << r.error();
}

// Issue 29: the rack pool as the rack-wide prefix cache (--rack-prefix-cache on), both memory
// models. The blocks the DE wrote behind after turn 1 were also published into the rack pool, so
// the next turns' hits come from the region, not storage, on the PE path and on the DE path (their
// storage read bytes are 0, the rack's hit counter counts every hit block). A rack block damaged
// in the region is a miss: it is read from storage instead (one block's bytes), never given to the
// model, and its good copy is published again. Outputs equal the reference throughout.
class RackPrefixCacheTest : public RackSubstrateTest {
 protected:
  RackPrefixCacheTest() { rack_prefix_cache_ = true; }

  // Flips one payload byte of the rack's copy of block `hash` (a test double for a damaged line:
  // written through a pin of a third attachment, as a faulty writer on another host would).
  void CorruptRackBlock(const kv::BlockHash& hash) {
    pool::OpenOptions oo;
    oo.background_thread = false;
    oo.lock_manager = false;  // an engine holds the non-coherent manager role
    oo.node = 2;
    auto p = pool::Pool::Open(rack_path_, oo);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto pin = (*p)->Pin(hash);
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    ASSERT_GT(pin->size, kv::kBlockFileHeaderBytes + 100);
    auto* b = const_cast<std::byte*>(pin->data) + kv::kBlockFileHeaderBytes + 100;
    *b ^= std::byte{0x5A};
    ASSERT_TRUE((*p)->Unpin(*pin).ok());
  }
  double RackLookups(const std::string& engine, const std::string& result) {
    return Series("dualpath_kv_lookups_total", engine, "tier=\"rack\",result=\"" + result + "\"");
  }
};

TEST_P(RackPrefixCacheTest, LaterTurnsReadTheirPrefixFromTheRackAndADamagedRackBlockIsAMiss) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(31);
  v1c::RequestSpec t1 = agent.NextTurn(1, 70, 5);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));
  const int64_t file_bytes = static_cast<int64_t>(
      storage::BlockStore::FileBytes(kv::BlockShape::For(config_.Geometry(), kBt)));

  // Turn 2, PE path: every hit block from the region, none from storage.
  v1c::RequestSpec t2 = agent.NextTurn(2, 20, 5);
  const int64_t hit2 = HitTokens(t2);
  ASSERT_GE(hit2, 4 * kBt);
  v1c::RequestResult r2 = Run(t2, v1c::READ_SIDE_PREFILL, hit2);
  ExpectReference(t2, r2);
  EXPECT_EQ(r2.loaded_tokens(), hit2);
  EXPECT_EQ(r2.read_bytes_prefill(), 0);  // storage read nothing for it
  EXPECT_EQ(RackLookups("p0.0", "hit"), hit2 / kBt);
  EXPECT_EQ(Series("dualpath_engine_rack_prefix_bytes_total", "p0.0"), hit2 / kBt * file_bytes);

  // Turn 3, DE path: the DE's hits from the region too.
  v1c::RequestSpec t3 = agent.NextTurn(3, 20, 5);
  const int64_t hit3 = HitTokens(t3);
  ASSERT_GT(hit3, hit2);
  v1c::RequestResult r3 = Run(t3, v1c::READ_SIDE_DECODE, hit3);
  ExpectReference(t3, r3);
  EXPECT_EQ(r3.loaded_tokens(), hit3);
  EXPECT_EQ(r3.read_bytes_decode(), 0);
  EXPECT_EQ(RackLookups("d0.0", "hit"), hit3 / kBt);

  // Turn 4, PE path, block 2 damaged in the region: a miss there, read from storage (so still
  // loaded, not recomputed), and its verified copy published into the rack again.
  v1c::RequestSpec t4 = agent.NextTurn(4, 20, 5);
  const int64_t hit4 = HitTokens(t4);
  CorruptRackBlock(PromptHashes(t4)[2]);
  const double published_before = Series("dualpath_engine_rack_prefix_published_total", "p0.0");
  v1c::RequestResult r4 = Run(t4, v1c::READ_SIDE_PREFILL, hit4);
  ExpectReference(t4, r4);
  EXPECT_EQ(r4.loaded_tokens(), hit4);
  EXPECT_EQ(r4.read_bytes_prefill(), file_bytes);  // block 2 alone came from storage
  EXPECT_EQ(RackLookups("p0.0", "corrupt"), 1);
  EXPECT_EQ(RackLookups("p0.0", "hit"), hit2 / kBt + hit4 / kBt - 1);
  EXPECT_EQ(Series("dualpath_engine_rack_prefix_published_total", "p0.0"), published_before + 1);
  // Every pin was dropped: the region holds the cached blocks, none of them pinned.
  pool::OpenOptions oo;
  oo.background_thread = false;
  oo.lock_manager = false;
  oo.node = 2;
  auto observer = pool::Pool::Open(rack_path_, oo);
  ASSERT_TRUE(observer.ok()) << observer.status().ToString();
  EXPECT_TRUE((*observer)->Contains(PromptHashes(t4)[2]));
  pool::PoolStats st;
  EXPECT_TRUE(WaitUntil([&] {
    st = (*observer)->Stats();
    return st.lock_error.empty() && st.total_pins == 0;
  })) << "pins "
      << st.total_pins << " " << st.lock_error;
  EXPECT_GE(st.ready_entries, static_cast<uint64_t>(hit4 / kBt));
}

std::string ModelName(const ::testing::TestParamInfo<pool::MemoryModel>& info) {
  return info.param == pool::MemoryModel::kCoherent ? "Coherent" : "NonCoherent";
}
INSTANTIATE_TEST_SUITE_P(Models, RackPrefixCacheTest,
                         ::testing::Values(pool::MemoryModel::kCoherent,
                                           pool::MemoryModel::kNonCoherent),
                         ModelName);
INSTANTIATE_TEST_SUITE_P(Models, RackSubstrateTest,
                         ::testing::Values(pool::MemoryModel::kCoherent,
                                           pool::MemoryModel::kNonCoherent),
                         ModelName);
INSTANTIATE_TEST_SUITE_P(Models, RackSubstrateMismatchTest,
                         ::testing::Values(pool::MemoryModel::kCoherent), ModelName);

// Issue 28: many agents' turns in flight at once. With continuous batching the DE decodes every
// ready request in the same steps (requests join and leave between steps); with serial decoding
// one at a time. Either way every request's tokens and first-logits digest equal the reference,
// and the turns after the first hit the blocks the batched steps wrote behind. The decode step
// counters add up: every request contributes gen_tokens - 1 request-steps.
class DecodeBatchingTest : public EngineTest, public ::testing::WithParamInterface<DecodeBatching> {
 protected:
  DecodeBatchingTest() { decode_batching_ = GetParam(); }
};

TEST_P(DecodeBatchingTest, ConcurrentAgentsGiveReferenceOutputs) {
  ASSERT_TRUE(pe_ && de_);
  constexpr int kAgents = 6;
  constexpr int kTurns = 3;
  std::vector<Agent> agents;
  for (int i = 0; i < kAgents; ++i) agents.emplace_back(100 + i);
  uint64_t id = 1;
  int64_t request_steps = 0;
  int64_t hits = 0;
  std::vector<v1c::Timing> stepped;  // timings of the requests that ran decode steps
  for (int turn = 0; turn < kTurns; ++turn) {
    std::vector<v1c::RequestSpec> specs;
    for (int i = 0; i < kAgents; ++i) {
      // Ragged: different appends and generation lengths (1 = no decode step at all).
      const uint32_t gen = turn == 1 && i == 0 ? 1 : 6 + 5 * i;
      specs.push_back(agents[i].NextTurn(id++, 20 + 9 * i, gen));
      request_steps += gen - 1;
    }
    for (const auto& s : specs) {
      const int64_t hit = HitTokens(s);
      hits += hit;
      sched_.Assign(pe_->engine_id(), de_->engine_id(), s, v1c::READ_SIDE_PREFILL, hit, 0);
    }
    for (const auto& s : specs) {
      SCOPED_TRACE("turn " + std::to_string(turn));
      v1c::RequestResult r = Wait(s.request_id());
      ExpectReference(s, r);
      EXPECT_EQ(r.generated_size(), static_cast<int>(s.gen_tokens()));
      // TTST's pieces in order: the PE's first token, the DE ready (PrefillDone and the PE's KV
      // in), taken into decode, the first step's token, done.
      const v1c::Timing& t = r.timing();
      EXPECT_GT(t.decode_ready_ns(), 0);
      EXPECT_LE(t.first_token_ns(), t.decode_ready_ns());
      EXPECT_LE(t.decode_ready_ns(), t.decode_start_ns());
      EXPECT_LE(t.decode_start_ns(), t.second_token_ns());
      EXPECT_LE(t.second_token_ns(), t.done_ns());
      if (s.gen_tokens() > 1) stepped.push_back(t);
    }
  }
  // A serial engine decodes one request at a time: no two requests' [taken in, done] overlap.
  // (Continuous ones may; how much depends on timing.)
  if (GetParam() == DecodeBatching::kSerial) {
    std::sort(stepped.begin(), stepped.end(), [](const v1c::Timing& a, const v1c::Timing& b) {
      return a.decode_start_ns() < b.decode_start_ns();
    });
    for (size_t i = 1; i < stepped.size(); ++i) {
      EXPECT_LE(stepped[i - 1].done_ns(), stepped[i].decode_start_ns()) << "request " << i;
    }
  }
  EXPECT_GT(hits, 0);  // later turns read what the batched steps wrote behind
  const std::string text = registry_.Render();
  const std::string labels = "{system=\"dualpath\",engine=\"d0.0\",node=\"d0\",role=\"decode\"}";
  const double steps = CounterValue(text, "dualpath_engine_decode_steps_total" + labels);
  const double requests = CounterValue(text, "dualpath_engine_decode_step_requests_total" + labels);
  EXPECT_EQ(requests, static_cast<double>(request_steps));
  if (GetParam() == DecodeBatching::kSerial) {
    EXPECT_EQ(steps, requests);  // one request per step
  } else {
    EXPECT_LE(steps, requests);
  }
  ASSERT_GT(steps, 0);
  // The DE has two ranks (ranks_). Continuous: a request joining a batch goes to the rank with
  // fewer context tokens, so the first step with two requests has one on each rank and runs its
  // attention on both (DecodeRankFor); later ones may stay on one. Serial never spreads a step.
  ASSERT_EQ(ranks_, 2u);
  const double spread = CounterValue(text, "dualpath_engine_decode_spread_steps_total" + labels);
  const double attn_max = CounterValue(text, "dualpath_engine_attention_max_ns_total" + labels);
  const double attn_avg = CounterValue(text, "dualpath_engine_attention_avg_ns_total" + labels);
  if (GetParam() == DecodeBatching::kSerial) {
    EXPECT_EQ(spread, 0);
  } else {
    EXPECT_LE(spread, steps);
    if (requests > steps) {
      EXPECT_GT(spread, 0) << "no decode step ran on both ranks";
    }
    if (spread > 0) {
      EXPECT_GT(attn_avg, 0);
      EXPECT_GE(attn_max, attn_avg);
    }
  }
  // How much the requests overlapped depends on timing: recorded, not asserted.
  RecordProperty("mean_decode_batch", std::to_string(requests / steps));
  RecordProperty("decode_spread_steps", std::to_string(spread));
}

// --max-decode-batch 2: many requests ready at once, never more than two in a decode step (the
// rest wait their turn, first come first served); every output equals the reference.
class BoundedDecodeBatchTest : public EngineTest {
 protected:
  BoundedDecodeBatchTest() { max_decode_batch_ = 2; }
};

TEST_F(BoundedDecodeBatchTest, NoStepHoldsMoreThanTheBound) {
  ASSERT_TRUE(pe_ && de_);
  constexpr int kAgents = 6;
  std::vector<Agent> agents;
  for (int i = 0; i < kAgents; ++i) agents.emplace_back(200 + i);
  uint64_t id = 1;
  // [taken into decode, last step] of every request that stepped, as (time, +1 / -1) events.
  std::vector<std::pair<int64_t, int>> edges;
  for (int turn = 0; turn < 2; ++turn) {
    std::vector<v1c::RequestSpec> specs;
    for (int i = 0; i < kAgents; ++i)
      specs.push_back(agents[i].NextTurn(id++, 24 + 7 * i, 12 + 3 * i));
    for (const auto& s : specs) {
      sched_.Assign(pe_->engine_id(), de_->engine_id(), s, v1c::READ_SIDE_PREFILL, HitTokens(s), 0);
    }
    for (const auto& s : specs) {
      v1c::RequestResult r = Wait(s.request_id());
      ExpectReference(s, r);
      const v1c::Timing& t = r.timing();
      ASSERT_GT(t.decode_start_ns(), 0);
      ASSERT_LE(t.decode_start_ns(), t.done_ns());
      edges.emplace_back(t.decode_start_ns(), +1);
      edges.emplace_back(t.done_ns(), -1);
    }
  }
  // A request is taken in only after an earlier one's last step: at equal times the end first.
  std::sort(edges.begin(), edges.end());
  int in_decode = 0, most = 0;
  for (const auto& [t, d] : edges) {
    in_decode += d;
    most = std::max(most, in_decode);
  }
  EXPECT_LE(most, 2);
  EXPECT_EQ(in_decode, 0);
  RecordProperty("most_requests_decoding_at_once", std::to_string(most));
}

// A joining request's decode rank: the one with the fewest context tokens, the lowest on ties.
TEST(DecodeRankForTest, PicksTheRankWithFewestTokensAndTheLowestOnTies) {
  EXPECT_EQ(DecodeRankFor(std::vector<int64_t>{0}), 0u);
  EXPECT_EQ(DecodeRankFor(std::vector<int64_t>{0, 0}), 0u);
  EXPECT_EQ(DecodeRankFor(std::vector<int64_t>{500, 0}), 1u);
  EXPECT_EQ(DecodeRankFor(std::vector<int64_t>{300, 200, 200, 900}), 1u);
  EXPECT_EQ(DecodeRankFor(std::vector<int64_t>{7, 9, 3}), 2u);
}

INSTANTIATE_TEST_SUITE_P(Modes, DecodeBatchingTest,
                         ::testing::Values(DecodeBatching::kContinuous, DecodeBatching::kSerial),
                         [](const auto& info) {
                           return info.param == DecodeBatching::kSerial ? "Serial" : "Continuous";
                         });

// Issue 28 acceptance 2 (docs/engine.md "Decode batching"): a full write-behind must not stall
// the decode step loop. The DE's store holds every publish (a sink that does not drain) and its
// write-behind queue holds two block files, so the first request's new prompt blocks fill it. The
// step loop still steps every request to its end (the DE's step counter says so) while the queue
// stays full; no result is reported and no block is visible before its blocks are written (the
// next turn must find them, and a block is never a hit before it is durable); the requests hold
// their buffers meanwhile. Once the sink drains, every block of every request is written and every
// result equals the reference. Before the fix the decode thread waited in WriteBehind::Submit
// (block_when_full) at the first request's third block and never stepped at all.
// Holds every block publish of the DE's store (after the file is written, before the rename that
// makes it visible) until opened: a storage sink that does not drain. (storage's own tests use
// storage::testing::PublishGate, a private header of that component.)
class HeldPublishes final : public storage::StorageFaults {
 public:
  void BeforePublish(const kv::BlockHash&) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void WaitArrived(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return arrived_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  bool open_ = false;
};

// An engine test whose DE store holds every publish until the test opens the gate (and at
// TearDown, so the write-behind can drain and the DE stop).
template <typename Param>
class HeldPublishesTest : public EngineTest, public ::testing::WithParamInterface<Param> {
 protected:
  HeldPublishesTest() { de_faults_ = &gate_; }
  void TearDown() override {
    gate_.Open();
    EngineTest::TearDown();
  }
  HeldPublishes gate_;
};

class FullWriteBehindTest : public HeldPublishesTest<DecodeBatching> {
 protected:
  FullWriteBehindTest() {
    decode_batching_ = GetParam();
    const kv::BlockShape shape =
        kv::BlockShape::For(model::RefModelConfig::Parse(kSpec).value().Geometry(), kBt);
    write_behind_bytes_ = 2 * storage::BlockStore::FileBytes(shape);
  }
};

TEST_P(FullWriteBehindTest, StepLoopKeepsSteppingWhileTheWriteBehindIsFull) {
  ASSERT_TRUE(pe_ && de_);
  constexpr int kAgents = 4;
  constexpr uint32_t kGen = 12;
  std::vector<v1c::RequestSpec> specs;
  for (int i = 0; i < kAgents; ++i) {
    Agent agent(200 + i);
    // 40-88 prompt tokens: 2-5 new prompt blocks each, and the fed tokens complete more.
    specs.push_back(agent.NextTurn(i + 1, 40 + 16 * i, kGen));
  }
  for (const auto& s : specs) {
    sched_.Assign(pe_->engine_id(), de_->engine_id(), s, v1c::READ_SIDE_PREFILL, 0, 0);
  }
  const double request_steps = kAgents * (kGen - 1);
  ASSERT_TRUE(WaitUntil([&] {
    return Series("dualpath_engine_decode_step_requests_total", "d0.0") >= request_steps;
  })) << "the decode step loop stalled on the full write-behind: "
      << Series("dualpath_engine_decode_step_requests_total", "d0.0") << " of " << request_steps
      << " request-steps ran";
  gate_.WaitArrived(1);  // the queue's first block is in flight, held before its publish
  // Every request's blocks: the prompt's and those its fed tokens complete.
  std::vector<std::vector<kv::BlockHash>> blocks;
  size_t total = 0;
  for (const auto& s : specs) {
    blocks.push_back(DecodedBlocks(s));
    total += blocks.back().size();
  }
  ASSERT_GT(total, 4u);  // more than the queue (2) and the one in flight hold
  for (const auto& s : specs) {
    EXPECT_FALSE(sched_.Wait(s.request_id(), std::chrono::milliseconds(0)).has_value())
        << "request " << s.request_id() << " reported before its blocks were written";
  }
  for (const auto& hs : blocks) {
    for (const auto& h : hs) EXPECT_FALSE(store_->Contains(h));
  }
  EXPECT_EQ(Series("dualpath_engine_unfinished_requests", "d0.0"), kAgents);  // buffers held
  gate_.Open();
  for (size_t i = 0; i < specs.size(); ++i) {
    ExpectReference(specs[i], Wait(specs[i].request_id()));
    for (size_t b = 0; b < blocks[i].size(); ++b) {
      EXPECT_TRUE(store_->Contains(blocks[i][b])) << "request " << i + 1 << " block " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, FullWriteBehindTest,
                         ::testing::Values(DecodeBatching::kContinuous, DecodeBatching::kSerial),
                         [](const auto& info) {
                           return info.param == DecodeBatching::kSerial ? "Serial" : "Continuous";
                         });

// Issue 28 acceptance 4 (docs/engine.md "When a result is reported"): by default the DE reports a
// finished request at once while its new blocks are still being written; with
// result_after_write it reports only once they are published. The DE's store holds every publish;
// the write-behind queue (default size) takes every block, so the requests retire. Without
// result_after_write every result arrives while no block is published yet (before the change the
// reporter always waited for the writes, and these results never came while the publishes were
// held); with it, none arrives before the publishes are let through. Without it, a result that
// queued at least result_wait_blocks new blocks (here: every one of these cold turns, with a
// threshold of 1) waits as with it, and one that queued fewer does not (a threshold above what
// they queue). Either way every block is published in the end and every output equals the
// reference.
struct ResultTiming {
  const char* name;
  bool after_write;
  uint32_t wait_blocks;
  bool waits;  // what the test expects
};
void PrintTo(const ResultTiming& t, std::ostream* os) { *os << t.name; }

class ResultTimingTest : public HeldPublishesTest<ResultTiming> {
 protected:
  ResultTimingTest() {
    result_after_write_ = GetParam().after_write;
    result_wait_blocks_ = GetParam().wait_blocks;
  }
};

TEST_P(ResultTimingTest, ResultWaitsForItsBlocksOnlyWhenAskedTo) {
  ASSERT_TRUE(pe_ && de_);
  constexpr int kAgents = 3;
  constexpr uint32_t kGen = 6;
  std::vector<v1c::RequestSpec> specs;
  std::vector<std::vector<kv::BlockHash>> blocks;
  for (int i = 0; i < kAgents; ++i) {
    Agent agent(700 + i);
    specs.push_back(agent.NextTurn(i + 1, 40 + 16 * i, kGen));
    blocks.push_back(DecodedBlocks(specs.back()));
    ASSERT_FALSE(blocks.back().empty());
  }
  for (const auto& s : specs) {
    sched_.Assign(pe_->engine_id(), de_->engine_id(), s, v1c::READ_SIDE_PREFILL, 0, 0);
  }
  const bool waits = GetParam().waits;
  if (!waits) {
    for (const auto& s : specs) {
      ExpectReference(s, Wait(s.request_id()));  // reported with its publishes still held
    }
    for (const auto& hs : blocks) {
      for (const auto& h : hs) EXPECT_FALSE(store_->Contains(h));
    }
  } else {
    // The DE has stepped every request to its end and the first publish is held.
    ASSERT_TRUE(WaitUntil([&] {
      return Series("dualpath_engine_decode_step_requests_total", "d0.0") >= kAgents * (kGen - 1.0);
    }));
    gate_.WaitArrived(1);
    for (const auto& s : specs) {
      EXPECT_FALSE(sched_.Wait(s.request_id(), std::chrono::milliseconds(0)).has_value())
          << "request " << s.request_id() << " reported before its blocks were written";
    }
  }
  gate_.Open();
  if (waits) {
    for (const auto& s : specs) ExpectReference(s, Wait(s.request_id()));
  }
  // Every block is published in the end (the engines flush their write-behind when they stop).
  sched_.Shutdown();
  for (auto& t : threads_) t.join();
  threads_.clear();
  de_.reset();
  for (size_t i = 0; i < blocks.size(); ++i) {
    for (size_t b = 0; b < blocks[i].size(); ++b) {
      EXPECT_TRUE(store_->Contains(blocks[i][b])) << "request " << i + 1 << " block " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ResultTimingTest,
                         ::testing::Values(ResultTiming{"AtOnce", false, 0, false},
                                           ResultTiming{"AfterWrite", true, 0, true},
                                           ResultTiming{"ManyNewBlocksWait", false, 1, true},
                                           ResultTiming{"FewNewBlocksDoNot", false, 1000, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// Issue 28: the prefill engine's forward batches. Many agents' turns at once, over every read
// side, with a compute quota small enough that long prompts are chunked across batches: with
// serial prefill, batched prefill on one rank, and on four ranks with packed or round-robin
// placement, every request's tokens and first-logits digest equal the reference (KV identical
// whatever the batch, chunk and rank). The batch counters add up: the tokens of all forward
// batches are exactly the tokens the requests computed (prompt - loaded), and the stats file
// written at exit says the same and has one attention total per rank.
struct PrefillMode {
  const char* name;
  PrefillBatching batching;
  uint32_t ranks;
  sched::RankPlacement placement;
};

class PrefillBatchingTest : public EngineTest, public ::testing::WithParamInterface<PrefillMode> {
 protected:
  PrefillBatchingTest() {
    prefill_batching_ = GetParam().batching;
    ranks_ = GetParam().ranks;
    rank_placement_ = GetParam().placement;
    compute_quota_ = 2 * kNanosPerMilli;  // ~1K new tokens on an empty context: chunks
  }
};

TEST_P(PrefillBatchingTest, ConcurrentAgentsGiveReferenceOutputs) {
  ASSERT_TRUE(pe_ && de_);
  constexpr int kAgents = 7;
  constexpr int kTurns = 3;
  const v1c::ReadSide sides[] = {v1c::READ_SIDE_PREFILL, v1c::READ_SIDE_DECODE,
                                 v1c::READ_SIDE_SPLIT};
  std::vector<Agent> agents;
  for (int i = 0; i < kAgents; ++i) agents.emplace_back(400 + i);
  uint64_t id = 1;
  int64_t computed = 0;
  for (int turn = 0; turn < kTurns; ++turn) {
    std::vector<v1c::RequestSpec> specs;
    for (int i = 0; i < kAgents; ++i) {
      // Ragged appends; agent 0 starts with a long prompt (chunked under the quota).
      specs.push_back(agents[i].NextTurn(id++, turn == 0 && i == 0 ? 1500 : 30 + 37 * i, 4));
    }
    for (size_t k = 0; k < specs.size(); ++k) {
      const v1c::RequestSpec& s = specs[k];
      const int64_t hit = HitTokens(s);
      const v1c::ReadSide side = hit == 0 ? v1c::READ_SIDE_PREFILL : sides[(k + turn) % 3];
      const int64_t prefill_read = side == v1c::READ_SIDE_SPLIT ? hit / kBt / 2 * kBt : 0;
      sched_.Assign(pe_->engine_id(), de_->engine_id(), s, side, hit, prefill_read);
    }
    for (const auto& s : specs) {
      SCOPED_TRACE("turn " + std::to_string(turn));
      v1c::RequestResult r = Wait(s.request_id());
      ExpectReference(s, r);
      computed += s.prompt_size() - r.loaded_tokens();
    }
  }
  const std::string text = registry_.Render();
  const std::string labels = "{system=\"dualpath\",engine=\"p0.0\",node=\"p0\",role=\"prefill\"}";
  const double batches = CounterValue(text, "dualpath_engine_prefill_batches_total" + labels);
  const double chunks = CounterValue(text, "dualpath_engine_prefill_batch_requests_total" + labels);
  const double tokens = CounterValue(text, "dualpath_engine_prefill_batch_tokens_total" + labels);
  EXPECT_EQ(tokens, static_cast<double>(computed));
  ASSERT_GT(batches, 0);
  EXPECT_GE(chunks, kAgents * kTurns);
  if (GetParam().batching == PrefillBatching::kSerial) {
    EXPECT_EQ(chunks, batches);
  } else {
    EXPECT_GT(chunks, kAgents * kTurns);  // the long prompt took several chunks
  }
  RecordProperty("mean_prefill_batch", std::to_string(chunks / batches));
  // The engines stop (and the PE writes its stats file) on the scheduler's shutdown word; their
  // Run threads must end before the engines are destroyed.
  sched_.Shutdown();
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::ifstream in(root_ + "/batches.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["batches"].get<double>(), batches);
  EXPECT_NEAR(j["mean_tokens"].get<double>() * batches, tokens, 1e-6 * tokens);
  if (GetParam().batching == PrefillBatching::kBatched) {
    ASSERT_EQ(j["rank_attention_s"].size(), GetParam().ranks);
    EXPECT_GT(j["rank_attention_s"][0].get<double>(), 0);
    EXPECT_GE(j["attention_max_avg"]["weighted"].get<double>(), 1.0);
    RecordProperty("attention_max_avg", j["attention_max_avg"].dump());
    // What the planning model predicted for the same batches, its error against the measured
    // rank times, and the model in use (calibrated by default: fitted once 24 rank samples were
    // in; the outputs above are the reference's whatever model planned the batches).
    EXPECT_EQ(j["planned_max_avg"]["batches"], j["attention_max_avg"]["batches"]);
    EXPECT_GE(j["planned_max_avg"]["weighted"].get<double>(), 1.0);
    EXPECT_GE(j["model_error"]["planned"].get<double>(), 0.0);
    EXPECT_GE(j["model_error"]["reference"].get<double>(), 0.0);
    ASSERT_TRUE(j["attention_model"].is_object());
    EXPECT_GT(j["attention_model"]["samples"].get<double>(), 0);
    RecordProperty("model_error", j["model_error"].dump());
    RecordProperty("attention_model", j["attention_model"].dump());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, PrefillBatchingTest,
    ::testing::Values(
        PrefillMode{"Serial", PrefillBatching::kSerial, 1, sched::RankPlacement::kPacked},
        PrefillMode{"OneRank", PrefillBatching::kBatched, 1, sched::RankPlacement::kPacked},
        PrefillMode{"FourRanksPacked", PrefillBatching::kBatched, 4, sched::RankPlacement::kPacked},
        PrefillMode{"FourRanksRoundRobin", PrefillBatching::kBatched, 4,
                    sched::RankPlacement::kRoundRobin}),
    [](const auto& info) { return std::string(info.param.name); });

// Issue 17 (scheduler service killed and restarted): the new service knows no engine, so a Fetch
// of the old group is kNotFound; each engine registers again under the same name and keeps
// serving with the state it has (model, store, buffers). Before the fix the engine retried the
// failing Fetch until request_timeout and exited.
TEST_F(EngineTest, EnginesRegisterAgainWithARestartedSchedulerAndKeepServing) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(23);
  v1c::RequestSpec t1 = agent.NextTurn(1, 40, 5);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));

  sched_.Restart();
  std::optional<uint32_t> pe = sched_.WaitRegistered("p0.0", kGuard);
  std::optional<uint32_t> de = sched_.WaitRegistered("d0.0", kGuard);
  ASSERT_TRUE(pe.has_value() && de.has_value()) << "the engines did not register again";
  v1c::RequestSpec t2 = agent.NextTurn(2, 30, 5);
  const int64_t hit = HitTokens(t2);
  ASSERT_GT(hit, 0);  // what the first registration's DE wrote is still used
  sched_.Assign(*pe, *de, t2, v1c::READ_SIDE_DECODE, hit, 0);
  v1c::RequestResult r2 = Wait(t2.request_id());
  ExpectReference(t2, r2);
  EXPECT_EQ(r2.loaded_tokens(), hit);
}

// Issue 17 (compute link down): when the DE cannot push its DE-path KV to the PE, it reports the
// attempt failed itself, at once. Before, it dropped its side silently and only the PE's request
// timeout (60 s by default) ended the request: a PE that still saw the DE alive (its own transfer
// engine had not timed the DE out) waited that long. Here the "PE" is a transfer address nothing
// listens on, so only the DE can report.
TEST_F(EngineTest, DecodeEngineReportsAFailedPushToThePeAtOnce) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(31);
  v1c::RequestSpec t1 = agent.NextTurn(1, 40, 5);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));
  v1c::RequestSpec t2 = agent.NextTurn(2, 30, 5);
  const int64_t hit = HitTokens(t2);
  ASSERT_GT(hit, 0);

  engine::v1::StartDecodeRequest req;
  *req.mutable_assignment() =
      sched_.MakeAssignment(pe_->engine_id(), de_->engine_id(), t2, v1c::READ_SIDE_DECODE, hit, 0);
  req.set_pe_name("p9.0");
  req.set_pe_transfer_addr("127.0.0.1:1");  // refused: the push cannot happen
  req.set_pe_area_addr(4096);
  req.set_pe_xfer_id(77);
  req.set_prefill_read_tokens(0);
  req.set_decode_read_tokens(hit);
  auto stub = engine::v1::EnginePeer::NewStub(
      grpc::CreateChannel(de_->info().peer_addr(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext call;
  call.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  engine::v1::StartDecodeReply reply;
  ASSERT_TRUE(stub->StartDecode(&call, req, &reply).ok());

  // Well before the 30 s request timeout of this fixture: kGuard is a hang guard only.
  v1c::RequestResult r = Wait(t2.request_id());
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("cannot reach PE p9.0"), std::string::npos) << r.error();
  EXPECT_EQ(r.attempt(), 0u);
}

TEST_F(EngineTest, CorruptHitBlockIsRecomputedWithIdenticalOutputs) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(23);
  v1c::RequestSpec t1 = agent.NextTurn(1, 70, 5);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));
  uint64_t id = 2;
  for (v1c::ReadSide side : {v1c::READ_SIDE_PREFILL, v1c::READ_SIDE_DECODE, v1c::READ_SIDE_SPLIT}) {
    SCOPED_TRACE(v1c::ReadSide_Name(side));
    v1c::RequestSpec s = agent.NextTurn(id++, 20, 5);
    int64_t hit = HitTokens(s);
    ASSERT_GE(hit, 4 * kBt);
    // Damage the third hit block: blocks 0-1 load, block 2 and everything after is recomputed.
    CorruptBlock(PromptHashes(s)[2]);
    int64_t prefill_read = side == v1c::READ_SIDE_SPLIT ? kBt : 0;  // block 2 is the DE's
    v1c::RequestResult r = Run(s, side, hit, prefill_read);
    ExpectReference(s, r);
    EXPECT_EQ(r.hit_tokens(), hit);
    EXPECT_EQ(r.loaded_tokens(), 2 * kBt);
    // The recomputed block was written again: the next turn hits it.
    EXPECT_TRUE(store_->Contains(PromptHashes(s)[2]));
  }
}

TEST_F(EngineTest, DeadDecodeEngineFailsTheRequestInsteadOfHanging) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(5);
  v1c::RequestSpec t1 = agent.NextTurn(1, 40, 4);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));
  // The decode engine goes away (its transfer engine and gRPC server close).
  de_->Stop();
  threads_.back().join();
  threads_.pop_back();
  const uint32_t de_id = de_->engine_id();
  de_.reset();
  for (v1c::ReadSide side : {v1c::READ_SIDE_PREFILL, v1c::READ_SIDE_DECODE}) {
    v1c::RequestSpec s = agent.NextTurn(side == v1c::READ_SIDE_PREFILL ? 2 : 3, 20, 4);
    sched_.Assign(pe_->engine_id(), de_id, s, side, HitTokens(s), 0);
    v1c::RequestResult r = Wait(s.request_id());
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(r.error().empty());
  }
  // The PE is still healthy: a request the test computes against a fresh DE succeeds.
  de_ = StartEngine(Role::kDecode, "d1.0");
  ASSERT_TRUE(de_);
  v1c::RequestSpec s = agent.NextTurn(4, 20, 4);
  ExpectReference(s, Run(s, v1c::READ_SIDE_DECODE, HitTokens(s)));
}

// A decode engine whose storage read never completes (until the test ends): the PE must give up
// on the DE-path layers at its deadline, fail the request, and keep serving.
class StuckReads final : public storage::StorageFaults {
 public:
  Status BeforeRead(const kv::BlockHash&) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!stuck_) {
      return Status::Ok();
    }
    cv_.wait(lock, [&] { return !stuck_; });
    return IoError("injected: read released at test end");
  }
  void Stick() {
    std::lock_guard<std::mutex> lock(mu_);
    stuck_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stuck_ = false;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stuck_ = false;
};

class StuckDecodeReadTest : public EngineTest {
 protected:
  StuckDecodeReadTest() {
    request_timeout_ = 2 * kNanosPerSecond;  // the deadline under test, not a timing assertion
    de_faults_ = &stuck_;
  }
  void TearDown() override {
    stuck_.Release();  // lets the DE's reader finish so the engines can stop
    EngineTest::TearDown();
  }
  StuckReads stuck_;
};

TEST_F(StuckDecodeReadTest, PeFailsARequestWhoseDecodePathKvNeverArrives) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(3);
  v1c::RequestSpec t1 = agent.NextTurn(1, 40, 4);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));
  stuck_.Stick();
  v1c::RequestSpec t2 = agent.NextTurn(2, 20, 4);
  int64_t hit = HitTokens(t2);
  ASSERT_GT(hit, 0);
  v1c::RequestResult r = Run(t2, v1c::READ_SIDE_DECODE, hit);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("did not arrive"), std::string::npos) << r.error();
  // The DE never confirmed it stopped pushing (its read is still stuck), so the PE keeps that
  // area out of use: the next request must not share it. Let the read fail now; the DE saw the
  // abort and pushes nothing.
  stuck_.Release();
  // The PE keeps serving: a PE-path request (no DE reads) completes with reference outputs.
  v1c::RequestSpec t3 = agent.NextTurn(3, 20, 4);
  ExpectReference(t3, Run(t3, v1c::READ_SIDE_PREFILL, HitTokens(t3)));
}

// A request that times out at the DE while its PE has not yet computed it (a PE slower than the
// DE's request timeout, as in the continuous-batching run of docs/engine.md "Decode batching"):
// the PE still puts its prefill KV into the DE buffer it was given, one-sided, before its
// PrefillDone is refused. Before the fix the DE freed that buffer at the timeout and the next
// request (b2, a split read) got the same memory: the PE's late puts of the expired request then
// overwrote b2's DE-loaded KV, and b2 decoded wrong tokens. Now the buffer stays quarantined until
// the PE's word (its refused PrefillDone, its AbortDecode) says nothing more of it can land.
class SlowPeTest : public EngineTest {
 protected:
  SlowPeTest() {
    de_request_timeout_ = 2 * kNanosPerSecond;  // the DE deadline under test, not a timing check
    pe_faults_ = &pe_reads_;
  }
  void TearDown() override {
    pe_reads_.Release();
    EngineTest::TearDown();
  }
  StuckReads pe_reads_;
};

TEST_F(SlowPeTest, ExpiredRequestsBufferIsNotReusedWhileItsPeMayStillPutIntoIt) {
  ASSERT_TRUE(pe_ && de_);
  Agent a(11);
  Agent b(12);
  v1c::RequestSpec a1 = a.NextTurn(1, 64, 4);
  ExpectReference(a1, Run(a1, v1c::READ_SIDE_PREFILL, 0));
  v1c::RequestSpec b1 = b.NextTurn(2, 64, 4);
  ExpectReference(b1, Run(b1, v1c::READ_SIDE_PREFILL, 0));
  // a2: the PE admits it (the DE allocates its buffer) but its PE-side read is held, so the PE
  // computes it only after the DE's deadline.
  pe_reads_.Stick();
  v1c::RequestSpec a2 = a.NextTurn(3, 32, 8);
  const int64_t hit_a = HitTokens(a2);
  ASSERT_GT(hit_a, 0);
  sched_.Assign(pe_->engine_id(), de_->engine_id(), a2, v1c::READ_SIDE_PREFILL, hit_a, 0);
  const std::string timeout = "code=\"" + std::string(CodeName(Code::kTimeout)) + "\"";
  ASSERT_TRUE(WaitUntil([&] {
    return Series("dualpath_engine_request_errors_total", "d0.0", timeout) >= 1;
  })) << "a2 never timed out at the DE";
  // b2: admitted after a2 expired at the DE; its DE share is read into its DE buffer at once, its
  // PE share waits behind a2's held read (the PE reads in admission order), so the PE computes
  // a2 (and puts a2's KV) before b2.
  v1c::RequestSpec b2 = b.NextTurn(4, 32, 8);
  const int64_t hit_b = HitTokens(b2);
  ASSERT_GE(hit_b, 2 * static_cast<int64_t>(kBt));
  sched_.Assign(pe_->engine_id(), de_->engine_id(), b2, v1c::READ_SIDE_SPLIT, hit_b, kBt);
  ASSERT_TRUE(WaitUntil([&] { return Series("dualpath_engine_reads_total", "d0.0") >= 1; }))
      << "b2's DE-path read never finished";
  pe_reads_.Release();  // a2's held read fails (injected): the PE recomputes a2 from token 0
  v1c::RequestResult ra = Wait(3);
  EXPECT_FALSE(ra.ok()) << "a2's PrefillDone must be refused: it timed out at the DE";
  ExpectReference(b2, Wait(4));
  // The quarantined buffer was freed once the PE's word came: nothing is left on the DE.
  EXPECT_TRUE(
      WaitUntil([&] { return Series("dualpath_engine_unfinished_requests", "d0.0") == 0; }));
}

// A DE-path request whose DE read is held must not hold up a PE-path request admitted after it:
// the PE computes the oldest request whose hit KV is in place (§6.2). With in-order compute the
// second result could only come after the first request's deadline (30 s), failed.
class HeldDecodeReadTest : public EngineTest {
 protected:
  HeldDecodeReadTest() { de_faults_ = &held_; }
  void TearDown() override {
    held_.Release();
    EngineTest::TearDown();
  }
  StuckReads held_;
};

TEST_F(HeldDecodeReadTest, ReadyRequestComputesWhileAnEarlierOneWaitsForItsDecodePathRead) {
  ASSERT_TRUE(pe_ && de_);
  Agent a(5);
  Agent b(6);
  v1c::RequestSpec a1 = a.NextTurn(1, 40, 4);
  ExpectReference(a1, Run(a1, v1c::READ_SIDE_PREFILL, 0));
  v1c::RequestSpec b1 = b.NextTurn(2, 40, 4);
  ExpectReference(b1, Run(b1, v1c::READ_SIDE_PREFILL, 0));
  held_.Stick();
  v1c::RequestSpec a2 = a.NextTurn(3, 20, 4);
  v1c::RequestSpec b2 = b.NextTurn(4, 20, 4);
  const int64_t hit_a = HitTokens(a2);
  const int64_t hit_b = HitTokens(b2);
  ASSERT_GT(hit_a, 0);
  ASSERT_GT(hit_b, 0);
  sched_.Assign(pe_->engine_id(), de_->engine_id(), a2, v1c::READ_SIDE_DECODE, hit_a, 0);
  sched_.Assign(pe_->engine_id(), de_->engine_id(), b2, v1c::READ_SIDE_PREFILL, hit_b, 0);
  v1c::RequestResult rb = Wait(4);
  ExpectReference(b2, rb);
  EXPECT_EQ(rb.loaded_tokens(), hit_b);
  // The held request is still waiting for its DE's read: no result of it exists yet.
  EXPECT_FALSE(sched_.Wait(3, std::chrono::milliseconds(0)).has_value());
  // Released, the read fails (injected): the DE loaded nothing and the PE recomputes it all.
  held_.Release();
  v1c::RequestResult ra = Wait(3);
  ExpectReference(a2, ra);
  EXPECT_EQ(ra.loaded_tokens(), 0);
}

// The prompt's hash chain is computed once by the scheduler and carried in the assignment; an
// engine checks it on receipt (its length, and its first hash against its own hasher) so a chain
// of the wrong size or hashed another way never names the blocks it reads or writes.
v1c::Assignment WithChain(const v1c::RequestSpec& s, kv::HashAlgo algo, std::string_view seed,
                          uint32_t bt) {
  v1c::Assignment a;
  *a.mutable_request() = s;
  std::vector<uint32_t> prompt(s.prompt().begin(), s.prompt().end());
  std::vector<kv::BlockHash> chain = kv::BlockHasher::Create(algo, seed, bt)->HashPrefix(prompt);
  a.set_prompt_block_hashes(reinterpret_cast<const char*>(chain.data()),
                            chain.size() * sizeof(kv::BlockHash));
  return a;
}

TEST(CarriedPromptHashesTest, AcceptsTheServicesChainAndRefusesAnyOtherClearly) {
  const kv::BlockHasher engine = *kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, "0", kBt);
  Agent agent(9);
  const v1c::RequestSpec s = agent.NextTurn(7, 40, 2);  // 40 tokens: 2 full blocks of 16
  const std::vector<uint32_t> prompt(s.prompt().begin(), s.prompt().end());

  Result<std::vector<kv::BlockHash>> ok =
      CarriedPromptHashes(WithChain(s, kv::HashAlgo::kSha256Cbor, "0", kBt), engine);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, engine.HashPrefix(prompt));

  auto expect_refused = [&](const v1c::Assignment& a, const std::string& needle) {
    Result<std::vector<kv::BlockHash>> r = CarriedPromptHashes(a, engine);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("request 7"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  v1c::Assignment shorter = WithChain(s, kv::HashAlgo::kSha256Cbor, "0", kBt);
  shorter.mutable_prompt_block_hashes()->resize(32);
  expect_refused(shorter, "has 32 bytes");
  v1c::Assignment ragged = WithChain(s, kv::HashAlgo::kSha256Cbor, "0", kBt);
  ragged.mutable_prompt_block_hashes()->push_back('\0');
  expect_refused(ragged, "needs 2 hashes of 32 bytes (64 bytes)");
  v1c::Assignment none = WithChain(s, kv::HashAlgo::kSha256Cbor, "0", kBt);
  none.clear_prompt_block_hashes();
  expect_refused(none, "has 0 bytes");
  // Hashed another way: the count matches, the names do not.
  expect_refused(WithChain(s, kv::HashAlgo::kSha256Cbor, "1", kBt), "hash prompts differently");
  expect_refused(WithChain(s, kv::HashAlgo::kXxh3, "0", kBt), "hash prompts differently");
  expect_refused(WithChain(s, kv::HashAlgo::kSha256Cbor, "0", 20), "hash prompts differently");

  // A prompt without a full block carries no hashes.
  const v1c::RequestSpec tiny = Agent(10).NextTurn(8, kBt - 1, 2);
  Result<std::vector<kv::BlockHash>> empty =
      CarriedPromptHashes(WithChain(tiny, kv::HashAlgo::kSha256Cbor, "0", kBt), engine);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
}

TEST_F(EngineTest, AssignmentWithAWrongHashChainFailsItsRequestAndTheEngineKeepsServing) {
  ASSERT_TRUE(pe_ && de_);
  Agent agent(17);
  v1c::RequestSpec t1 = agent.NextTurn(1, 40, 4);
  v1c::Assignment a =
      sched_.MakeAssignment(pe_->engine_id(), de_->engine_id(), t1, v1c::READ_SIDE_PREFILL, 0, 0);
  a.mutable_prompt_block_hashes()->resize(a.prompt_block_hashes().size() - 32);
  sched_.AssignRaw(pe_->engine_id(), a);
  v1c::RequestResult r = Wait(1);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("prompt_block_hashes"), std::string::npos) << r.error();
  // Nothing was written under the truncated chain; the well-formed assignment runs normally.
  for (const kv::BlockHash& h : PromptHashes(t1)) {
    EXPECT_FALSE(store_->Contains(h));
  }
  t1.set_request_id(2);
  ExpectReference(t1, Run(t1, v1c::READ_SIDE_PREFILL, 0));
  for (const kv::BlockHash& h : PromptHashes(t1)) {
    EXPECT_TRUE(store_->Contains(h));
  }
}

}  // namespace
}  // namespace dualpath::engine
