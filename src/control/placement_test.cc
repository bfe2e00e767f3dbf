// The scheduler service's placement mode (`control serve --placement`, state_place.cc) over gRPC:
// an in-process ControlServer on a Unix socket, a test acting as the proxy (registering instances,
// reporting their load, placing requests). Hits are probed where `dualpath.KVStore` keeps a
// namespace (--store-namespace). No sleeps: a Place that must wait is released by a report, and
// liveness runs on a ManualClock.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/control/client.h"
#include "dualpath/control/server.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::control {
namespace {

constexpr const char* kSpec = "layers=2,q_heads=2,kv_heads=2,head_dim=16,vocab=1024";
constexpr uint32_t kBlock = 32;  // vLLM's CPU block size
constexpr const char* kNamespace = "vllm-test";
constexpr const char* kSeed = "vllm-none-hash";  // vLLM's seed with PYTHONHASHSEED unset
constexpr uint32_t kLongWaitMs = 20000;          // a Place that a report must release early

std::vector<uint32_t> Tokens(uint32_t n, uint32_t salt) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (i * 7 + salt * 13 + 1) % 1000;
  return t;
}

v1::EngineReport Report(uint32_t engine, int64_t read_queue, int64_t unfinished_tokens = 0) {
  v1::EngineReport r;
  r.set_engine_id(engine);
  r.set_read_queue_tokens(read_queue);
  r.set_unfinished_tokens(unfinished_tokens);
  r.set_hbm_free_tokens(1'000'000);
  return r;
}

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/var/tmp/dp_placement_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  ServiceOptions Options() {
    ServiceOptions o;
    o.placement = true;
    o.model_spec = kSpec;
    o.block_tokens = kBlock;
    o.hash_seed = kSeed;
    o.store_root = dir_ + "/kv";
    o.store_namespace = kNamespace;
    o.expect_prefill = 2;
    o.expect_decode = 2;
    o.clock = &clock_;
    return o;
  }

  void Start(const ServiceOptions& o) {
    auto s = ControlServer::Start("unix:" + dir_ + "/sched.sock", o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    client_ = std::make_unique<Client>(server_->address());
  }

  // Stores prompt blocks [0, blocks) the way the vLLM connector's KVStore does: its persistent
  // tier is a BlockStore in <store_path>/<NamespaceFingerprint(namespace)>, keyed by vLLM's
  // sha256_cbor block hashes.
  void WriteBlocks(const std::vector<uint32_t>& prompt, uint32_t blocks) {
    storage::StoreOptions so;
    so.root = dir_ + "/kv";
    so.model_fingerprint = kv::NamespaceFingerprint(kNamespace);
    auto store = storage::BlockStore::Open(so);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto hasher = kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, kSeed, kBlock);
    ASSERT_TRUE(hasher.ok());
    const std::vector<kv::BlockHash> hashes = hasher->HashPrefix(prompt);
    auto model = model::RefModelConfig::Parse(kSpec);
    const kv::BlockShape shape = kv::BlockShape::For(model->Geometry(), kBlock);
    std::vector<std::byte> payload(shape.FullBytes(), std::byte{7});
    for (uint32_t b = 0; b < blocks; ++b) {
      ASSERT_TRUE((*store)->Write(hashes.at(b), shape, payload).ok());
    }
  }

  uint32_t Register(const std::string& name, v1::Role role) {
    v1::RegisterEngineRequest req;
    req.mutable_engine()->set_name(name);
    req.mutable_engine()->set_role(role);
    req.mutable_engine()->set_node(name);
    req.mutable_engine()->set_peer_addr("http://127.0.0.1:8000/" + name);
    req.mutable_engine()->set_transfer_addr("127.0.0.1:7000");
    auto r = client_->RegisterEngine(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->engine_id() : UINT32_MAX;
  }

  Result<v1::Assignment> Place(uint64_t id, const std::vector<uint32_t>& prompt,
                               std::vector<v1::EngineReport> reports, uint32_t wait_ms,
                               uint32_t gen = 8) {
    v1::PlaceRequest req;
    req.mutable_request()->set_request_id(id);
    for (uint32_t t : prompt) req.mutable_request()->add_prompt(t);
    req.mutable_request()->set_gen_tokens(gen);  // no teacher: placed requests run free
    for (auto& r : reports) *req.add_reports() = r;
    req.set_wait_ms(wait_ms);
    ASSIGN_OR_RETURN(v1::PlaceReply reply, client_->Place(req));
    return reply.assignment();
  }

  Result<v1::ReportEnginesReply> ReportEngines(std::vector<v1::EngineReport> reports,
                                               std::vector<uint32_t> dead = {}) {
    v1::ReportEnginesRequest req;
    for (auto& r : reports) *req.add_reports() = r;
    for (uint32_t d : dead) req.add_dead(d);
    req.set_reason("connection refused");
    return client_->ReportEngines(req);
  }

  Status Finish(uint64_t id, bool ok) {
    v1::RequestResult r;
    r.set_request_id(id);
    r.set_ok(ok);
    if (!ok) r.set_error("instance returned 500");
    return client_->ReportResult(r);
  }

  std::string dir_;
  ManualClock clock_{0};
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<Client> client_;
};

// §6.1's read side through Place: the hit comes from the KVStore namespace's directory with
// vLLM's hashing, and the side follows the two instances' reported read queues (a tie goes to
// the decode side, docs/sched.md "Read side").
TEST_F(PlacementTest, PlaceChoosesTheReadSideFromReportedQueues) {
  Start(Options());
  const uint32_t p0 = Register("p0", v1::ROLE_PREFILL);
  const uint32_t d0 = Register("d0", v1::ROLE_DECODE);
  const std::vector<uint32_t> prompt = Tokens(200, 1);
  WriteBlocks(prompt, 3);

  auto a = Place(1, prompt, {Report(p0, 0), Report(d0, 0)}, kLongWaitMs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->prefill_engine(), p0);
  EXPECT_EQ(a->decode_engine(), d0);
  EXPECT_EQ(a->prefill().name(), "p0");
  EXPECT_EQ(a->decode().peer_addr(), "http://127.0.0.1:8000/d0");
  EXPECT_EQ(a->decode().transfer_addr(), "127.0.0.1:7000");
  EXPECT_EQ(a->hit_tokens(), 3 * kBlock);
  EXPECT_EQ(a->side(), v1::READ_SIDE_DECODE);
  EXPECT_EQ(a->decode_read_tokens(), 3 * kBlock);
  EXPECT_EQ(a->prefill_read_tokens(), 0);
  // The keys the service probed, one per full prompt block (200 / 32 = 6).
  EXPECT_EQ(a->prompt_block_hashes().size(), 6u * 32u);
  auto hasher = kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, kSeed, kBlock);
  EXPECT_EQ(
      a->prompt_block_hashes().substr(0, 32),
      std::string(reinterpret_cast<const char*>(hasher->HashPrefix(prompt)[0].bytes.data()), 32));
  ASSERT_TRUE(Finish(1, true).ok());

  // The decode instance's storage link is busy: the prefill instance reads.
  auto b = Place(2, prompt, {Report(p0, 0), Report(d0, 5'000'000)}, kLongWaitMs);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->side(), v1::READ_SIDE_PREFILL);
  EXPECT_EQ(b->prefill_read_tokens(), 3 * kBlock);

  // Nothing stored: side by the same rule, nothing to read.
  auto c = Place(3, Tokens(100, 2), {Report(p0, 9'000'000), Report(d0, 0)}, kLongWaitMs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hit_tokens(), 0);
  EXPECT_EQ(server_->service().stats().placed, 3);

  // A duplicate id and a bad request are refused, naming them.
  auto dup = Place(2, prompt, {}, 0);
  EXPECT_EQ(dup.status().code(), Code::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("request_id 2"), std::string::npos);
  auto bad = Place(4, {5, 2000}, {}, 0);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("vocab"), std::string::npos) << bad.status().ToString();
}

// The PE choice is §6.1's across all prefill instances (they share one sched group): the one
// with fewer unfinished tokens; an overloaded one (> beta) never.
TEST_F(PlacementTest, PrefillChoiceBalancesTokensAcrossInstances) {
  ServiceOptions o = Options();
  o.unfinished_token_limit = 10'000;
  Start(o);
  const uint32_t p0 = Register("p0", v1::ROLE_PREFILL);
  const uint32_t p1 = Register("p1", v1::ROLE_PREFILL);
  const uint32_t d0 = Register("d0", v1::ROLE_DECODE);
  auto a = Place(1, Tokens(64, 1), {Report(p0, 0, 5000), Report(p1, 0, 100), Report(d0, 0)},
                 kLongWaitMs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->prefill_engine(), p1);
  auto b = Place(2, Tokens(64, 2), {Report(p0, 0, 100), Report(p1, 0, 20'000), Report(d0, 0)},
                 kLongWaitMs);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->prefill_engine(), p0);
}

// No instance can take the request: Place waits, a report that frees capacity releases it; with
// nobody freeing capacity it gives up after its wait, naming why, and the request is withdrawn
// (it adds no load later).
TEST_F(PlacementTest, PlaceWaitsForCapacityAndGivesUpAfterItsWait) {
  ServiceOptions o = Options();
  o.unfinished_token_limit = 1000;
  Start(o);
  const uint32_t p0 = Register("p0", v1::ROLE_PREFILL);
  const uint32_t d0 = Register("d0", v1::ROLE_DECODE);
  auto refused = Place(1, Tokens(64, 1), {Report(p0, 0, 5000), Report(d0, 0)}, 50);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("within 50 ms"), std::string::npos);
  EXPECT_NE(refused.status().message().find("live instances: 1 prefill, 1 decode"),
            std::string::npos);
  EXPECT_EQ(server_->service().stats().place_timeouts, 1);

  std::optional<Result<v1::Assignment>> waited;
  std::thread placer([&] { waited.emplace(Place(2, Tokens(64, 2), {}, kLongWaitMs)); });
  // Wait until the Place call is in (submitted), so the report below releases a waiting call.
  while (server_->service().stats().submitted < 2) std::this_thread::yield();
  ASSERT_TRUE(ReportEngines({Report(p0, 0, 0), Report(d0, 0)}).ok());
  placer.join();
  ASSERT_TRUE(waited.has_value());
  ASSERT_TRUE(waited->ok()) << waited->status().ToString();
  EXPECT_EQ((*waited)->request().request_id(), 2u);
  // The withdrawn request 1 was never assigned afterwards.
  EXPECT_EQ(server_->service().stats().placed, 1);
  EXPECT_EQ(server_->service().stats().assigned, 1);
}

// An instance the proxy reports dead gets no new placements; its placed requests are failed;
// registering it again brings it back. One that stops being reported dies by liveness.
TEST_F(PlacementTest, DeadInstancesAreAvoidedUntilTheyRegisterAgain) {
  Start(Options());
  const uint32_t p0 = Register("p0", v1::ROLE_PREFILL);
  const uint32_t d0 = Register("d0", v1::ROLE_DECODE);
  const uint32_t d1 = Register("d1", v1::ROLE_DECODE);
  // d1 carries more tokens, so d0 is the choice while it lives.
  auto a =
      Place(1, Tokens(64, 1), {Report(p0, 0), Report(d0, 0), Report(d1, 0, 5000)}, kLongWaitMs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->decode_engine(), d0);
  auto dead = ReportEngines({Report(p0, 0), Report(d1, 0, 5000)}, {d0});
  ASSERT_TRUE(dead.ok()) << dead.status().ToString();
  ASSERT_EQ(dead->dead_size(), 1);
  EXPECT_EQ(dead->dead(0), d0);
  EXPECT_EQ(server_->service().stats().failed, 1);      // request 1, on the dead instance
  EXPECT_EQ(Finish(1, false).code(), Code::kNotFound);  // already failed and forgotten

  auto b =
      Place(2, Tokens(64, 2), {Report(p0, 0), Report(d0, 0), Report(d1, 0, 5000)}, kLongWaitMs);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->decode_engine(), d1);  // d0's report was dropped: it is dead
  ASSERT_TRUE(Finish(2, true).ok());

  EXPECT_EQ(Register("d0", v1::ROLE_DECODE), d0);
  auto c =
      Place(3, Tokens(64, 3), {Report(p0, 0), Report(d0, 0), Report(d1, 0, 5000)}, kLongWaitMs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->decode_engine(), d0);

  // Only p0 and d1 keep being reported; three heartbeats later d0 is dead.
  clock_.Advance(FromSeconds(2));
  ASSERT_TRUE(ReportEngines({Report(p0, 0), Report(d1, 0)}).ok());
  clock_.Advance(FromSeconds(2));
  ASSERT_TRUE(ReportEngines({Report(p0, 0), Report(d1, 0)}).ok());
  server_->service().CheckLiveness();  // (the server's liveness thread may have run it first)
  EXPECT_EQ(server_->service().stats().engines_dead, 2);  // d0 reported dead once, now silent
  auto listed = client_->ListEngines();
  ASSERT_TRUE(listed.ok());
  for (int i = 0; i < listed->engines_size(); ++i) {
    EXPECT_EQ(listed->alive(i), listed->engine_ids(i) != d0) << listed->engines(i).name();
  }
}

// The two modes do not mix: a fetching engine cannot fetch from a placing service, and a
// fetch-mode service refuses Place and Submit is refused in placement mode.
TEST_F(PlacementTest, ModesRefuseEachOthersCalls) {
  Start(Options());
  const uint32_t p0 = Register("p0", v1::ROLE_PREFILL);
  Register("d0", v1::ROLE_DECODE);
  v1::FetchRequest fetch;
  fetch.set_group_id(p0);
  EXPECT_EQ(client_->Fetch(fetch).status().code(), Code::kFailedPrecondition);
  v1::SubmitRequest submit;
  submit.mutable_request()->set_request_id(9);
  submit.mutable_request()->add_prompt(1);
  submit.mutable_request()->set_gen_tokens(1);
  EXPECT_EQ(client_->Submit(submit).status().code(), Code::kFailedPrecondition);

  server_.reset();
  ServiceOptions o = Options();
  o.placement = false;
  Start(o);
  Register("p0", v1::ROLE_PREFILL);
  auto placed = Place(1, Tokens(10, 1), {}, 0);
  EXPECT_EQ(placed.status().code(), Code::kFailedPrecondition) << placed.status().ToString();
  EXPECT_EQ(ReportEngines({}).status().code(), Code::kFailedPrecondition);
}

}  // namespace
}  // namespace dualpath::control
