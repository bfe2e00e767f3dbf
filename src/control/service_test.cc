// The scheduler service end to end over gRPC: an in-process ControlServer on a Unix socket in a
// scratch directory, fake engines as gRPC clients (threads where a long poll must block). No
// sleeps: long polls return when work arrives, and liveness runs on a ManualClock.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/metrics.h"
#include "dualpath/control/client.h"
#include "dualpath/control/server.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/storage/block_store.h"
#include "lib/oversize_request.h"

namespace dualpath::control {
namespace {

// A small model: 2 layers x 64 tokens x 128 bytes = 16 KiB per block file payload.
constexpr const char* kSpec = "layers=2,q_heads=2,kv_heads=2,head_dim=16,vocab=512";
constexpr uint32_t kBlock = 64;
constexpr uint32_t kLongWaitMs = 20000;  // long polls that must return early (work arrives)

std::vector<uint32_t> Tokens(uint32_t n, uint32_t salt) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (i * 7 + salt * 13 + 1) % 500;
  return t;
}

v1::RequestSpec Spec(uint64_t id, std::vector<uint32_t> prompt, uint32_t gen = 4) {
  v1::RequestSpec s;
  s.set_request_id(id);
  s.set_agent_id(id % 3);
  s.set_turn(0);
  for (uint32_t t : prompt) s.add_prompt(t);
  s.set_gen_tokens(gen);
  for (uint32_t i = 0; i + 1 < gen; ++i) s.add_teacher(i + 1);
  return s;
}

v1::EngineReport Report(uint32_t engine, int64_t read_queue, int64_t hbm_free = 1'000'000) {
  v1::EngineReport r;
  r.set_engine_id(engine);
  r.set_read_queue_tokens(read_queue);
  r.set_hbm_free_tokens(hbm_free);
  return r;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/var/tmp/dp_control_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  ServiceOptions Options(SystemKind system, const std::string& engines) {
    ServiceOptions o;
    o.system = system;
    o.model_spec = kSpec;
    o.block_tokens = kBlock;
    o.store_root = dir_ + "/store";
    o.store_subdir = "run";
    o.engines = *ParseEngineList(engines);
    o.clock = &clock_;
    return o;
  }

  void Start(const ServiceOptions& o) {
    auto s = ControlServer::Start("unix:" + dir_ + "/sched.sock", o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    client_ = std::make_unique<Client>(server_->address());
  }

  // Publishes the KV blocks of prompt[0, blocks * kBlock) into the store the service probes,
  // keyed exactly as engines key them (sha256_cbor, seed "0").
  void WriteBlocks(const std::vector<uint32_t>& prompt, uint32_t first, uint32_t blocks,
                   const std::string& subdir = "run") {
    auto model = model::RefModelConfig::Parse(kSpec);
    ASSERT_TRUE(model.ok());
    storage::StoreOptions so;
    so.root = dir_ + "/store/" + subdir;
    so.model_fingerprint = kv::ModelFingerprint(model->Geometry());
    auto store = storage::BlockStore::Open(so);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto hasher = kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, "0", kBlock);
    ASSERT_TRUE(hasher.ok());
    const std::vector<kv::BlockHash> hashes = hasher->HashPrefix(prompt);
    const kv::BlockShape shape = kv::BlockShape::For(model->Geometry(), kBlock);
    std::vector<std::byte> payload(shape.FullBytes(), std::byte{7});
    for (uint32_t b = first; b < first + blocks; ++b) {
      ASSERT_TRUE((*store)->Write(hashes.at(b), shape, payload).ok());
    }
  }

  Result<v1::RegisterEngineReply> Register(const std::string& name, v1::Role role,
                                           const std::string& node, int64_t hbm = 1'000'000) {
    v1::RegisterEngineRequest req;
    req.mutable_engine()->set_name(name);
    req.mutable_engine()->set_role(role);
    req.mutable_engine()->set_node(node);
    req.mutable_engine()->set_peer_addr("10.99.2.1:" + std::to_string(7000 + name.size()));
    req.mutable_engine()->set_hbm_tokens(hbm);
    return client_->RegisterEngine(req);
  }

  Result<v1::FetchReply> Fetch(uint32_t group, std::vector<v1::EngineReport> reports,
                               uint32_t wait_ms) {
    v1::FetchRequest req;
    req.set_group_id(group);
    for (auto& r : reports) *req.add_reports() = r;
    req.set_wait_ms(wait_ms);
    return client_->Fetch(req);
  }

  Result<int64_t> Submit(const v1::RequestSpec& spec) {
    v1::SubmitRequest req;
    *req.mutable_request() = spec;
    ASSIGN_OR_RETURN(v1::SubmitReply reply, client_->Submit(req));
    return reply.hit_tokens();
  }

  Status ReportResult(uint64_t id, bool ok, uint32_t attempt, uint32_t first_token = 42) {
    v1::RequestResult r;
    r.set_request_id(id);
    r.set_ok(ok);
    r.set_attempt(attempt);
    if (!ok) r.set_error("injected failure");
    r.add_generated(first_token);
    return client_->ReportResult(r);
  }

  v1::WaitResultsReply WaitResults(uint64_t after, uint32_t wait_ms) {
    v1::WaitResultsRequest req;
    req.set_after_seq(after);
    req.set_wait_ms(wait_ms);
    Result<v1::WaitResultsReply> reply = client_->WaitResults(req);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.value_or(v1::WaitResultsReply());
  }

  void ShutdownRun() { ASSERT_TRUE(client_->Shutdown().ok()); }

  v1::ListEnginesReply ListEngines() {
    Result<v1::ListEnginesReply> reply = client_->ListEngines();
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.value_or(v1::ListEnginesReply());
  }

  // Registers p0.0 (id 0) and d0.0 (id 1) of a "p0.0:prefill:p0,d0.0:decode:d0" service.
  void Register1P1D() {
    ASSERT_TRUE(Register("p0.0", v1::ROLE_PREFILL, "p0").ok());
    ASSERT_TRUE(Register("d0.0", v1::ROLE_DECODE, "d0").ok());
  }

  std::string dir_;
  ManualClock clock_{0};
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<Client> client_;
};

constexpr const char* k1P1D = "p0.0:prefill:p0,d0.0:decode:d0";

TEST_F(ServiceTest, RegistrationFetchAssignmentRoundTrip) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  auto p = Register("p0.0", v1::ROLE_PREFILL, "p0");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->engine_id(), 0u);
  EXPECT_EQ(p->group_id(), 0u);
  EXPECT_EQ(p->system(), "dualpath");
  EXPECT_EQ(p->model_spec(), model::RefModelConfig::Parse(kSpec)->ToString());
  EXPECT_EQ(p->block_tokens(), kBlock);
  EXPECT_EQ(p->hash_algo(), "sha256_cbor");
  EXPECT_EQ(p->hash_seed(), "0");

  // Not every expected engine is there: work waits.
  ASSERT_TRUE(Submit(Spec(7, Tokens(100, 1))).ok());
  auto early = Fetch(0, {}, 0);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ(early->prefill_size(), 0);

  // The PE's long poll is woken by the decode engine's registration, which starts scheduling.
  std::optional<Result<v1::FetchReply>> pe_result;
  std::thread pe_thread([&] { pe_result.emplace(Fetch(0, {}, kLongWaitMs)); });
  auto d = Register("d0.0", v1::ROLE_DECODE, "d0");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->engine_id(), 1u);
  pe_thread.join();
  ASSERT_TRUE(pe_result.has_value());
  Result<v1::FetchReply>& pe = *pe_result;
  ASSERT_TRUE(pe.ok()) << pe.status().ToString();
  ASSERT_EQ(pe->prefill_size(), 1);
  const v1::Assignment& a = pe->prefill(0);
  EXPECT_EQ(a.request().request_id(), 7u);
  EXPECT_EQ(a.request().prompt_size(), 100);
  EXPECT_EQ(a.prefill_engine(), 0u);
  EXPECT_EQ(a.decode_engine(), 1u);
  EXPECT_EQ(a.prefill().name(), "p0.0");
  EXPECT_EQ(a.decode().name(), "d0.0");
  EXPECT_EQ(a.decode().peer_addr(), "10.99.2.1:7004");
  EXPECT_EQ(a.hit_tokens(), 0);
  EXPECT_EQ(a.attempt(), 0u);

  // The decode engine learns it will decode request 7.
  auto de = Fetch(1, {Report(1, 0)}, kLongWaitMs);
  ASSERT_TRUE(de.ok());
  ASSERT_EQ(de->decode_size(), 1);
  EXPECT_EQ(de->decode(0).request().request_id(), 7u);
  EXPECT_EQ(de->decode(0).decode_engine(), 1u);

  ASSERT_TRUE(ReportResult(7, true, 0).ok());
  auto res = WaitResults(0, kLongWaitMs);
  ASSERT_EQ(res.results_size(), 1);
  EXPECT_EQ(res.results(0).seq(), 1u);
  EXPECT_EQ(res.results(0).result().request_id(), 7u);
  EXPECT_TRUE(res.results(0).result().ok());

  const v1::ListEnginesReply engines = ListEngines();
  ASSERT_EQ(engines.engines_size(), 2);
  EXPECT_TRUE(engines.alive(0) && engines.alive(1));
  EXPECT_EQ(server_->service().stats().completed, 1);
}

struct SideCase {
  SystemKind system;
  int64_t pe_queue;
  int64_t de_queue;
  v1::ReadSide want;
};

class ReadSideTest : public ServiceTest, public ::testing::WithParamInterface<SideCase> {};

TEST_P(ReadSideTest, SystemDecidesTheReadSide) {
  const SideCase c = GetParam();
  Start(Options(c.system, k1P1D));
  const std::vector<uint32_t> prompt = Tokens(200, 3);
  WriteBlocks(prompt, 0, 2);
  Register1P1D();
  // The decode node's queue arrives with the DE's fetch, the prefill node's with the PE's.
  ASSERT_TRUE(Fetch(1, {Report(1, c.de_queue)}, 0).ok());
  auto hit = Submit(Spec(1, prompt));
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(*hit, 128);
  auto pe = Fetch(0, {Report(0, c.pe_queue)}, kLongWaitMs);
  ASSERT_TRUE(pe.ok()) << pe.status().ToString();
  ASSERT_EQ(pe->prefill_size(), 1);
  const v1::Assignment& a = pe->prefill(0);
  EXPECT_EQ(a.side(), c.want) << ReadSideName(a.side());
  EXPECT_EQ(a.hit_tokens(), 128);
  if (c.want == v1::READ_SIDE_NONE) {
    EXPECT_EQ(a.prefill_read_tokens() + a.decode_read_tokens(), 0);
  } else {
    EXPECT_EQ(a.prefill_read_tokens() + a.decode_read_tokens(), 128);
    EXPECT_EQ(a.prefill_read_tokens(), c.want == v1::READ_SIDE_PREFILL ? 128 : 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Systems, ReadSideTest,
                         ::testing::Values(
                             // Basic reads on the PE even when the DE's queue is the shorter one.
                             SideCase{SystemKind::kBasic, 5000, 0, v1::READ_SIDE_PREFILL},
                             // DualPath reads on the side with the shorter queue.
                             SideCase{SystemKind::kDualPath, 5000, 0, v1::READ_SIDE_DECODE},
                             SideCase{SystemKind::kDualPath, 0, 5000, v1::READ_SIDE_PREFILL},
                             // Oracle neither reads nor moves KV.
                             SideCase{SystemKind::kOracle, 5000, 0, v1::READ_SIDE_NONE}));

TEST_F(ServiceTest, HitTokensAreTheLongestStoredPrefixCappedBelowThePrompt) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  const std::vector<uint32_t> prompt = Tokens(150, 5);
  WriteBlocks(prompt, 0, 1);  // first block only
  auto hit = Submit(Spec(1, prompt));
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(*hit, 64);

  // Same second block content but a different first block: the chain differs, no hit.
  std::vector<uint32_t> other = prompt;
  other[0] = (other[0] + 1) % 500;
  EXPECT_EQ(*Submit(Spec(2, other)), 0);

  // A prompt of exactly two stored blocks: at least one token is computed.
  const std::vector<uint32_t> exact = Tokens(128, 9);
  WriteBlocks(exact, 0, 2);
  EXPECT_EQ(*Submit(Spec(3, exact)), 127);

  // Only the second block stored: not a prefix, no hit.
  const std::vector<uint32_t> gap = Tokens(200, 11);
  WriteBlocks(gap, 1, 1);
  EXPECT_EQ(*Submit(Spec(4, gap)), 0);

  // Shorter than a block: nothing to look up.
  EXPECT_EQ(*Submit(Spec(5, Tokens(10, 5))), 0);
}

// Node-local tiers (`cluster run --local-tiers`, docs/store.md "In the system"): the probe looks in
// every listed directory and a block counts when any of them holds it; the prefix still ends at
// the first block none has. A list element that would leave the root is refused.
TEST_F(ServiceTest, SeveralStoreSubdirsCountABlockAnyOfThemHolds) {
  ServiceOptions o = Options(SystemKind::kDualPath, k1P1D);
  o.store_subdir = "run-p0,run-d0";
  Start(o);
  const std::vector<uint32_t> prompt = Tokens(300, 6);
  WriteBlocks(prompt, 0, 1, "run-p0");
  WriteBlocks(prompt, 1, 1, "run-d0");
  WriteBlocks(prompt, 3, 1, "run-p0");  // after the gap at block 2: not part of the prefix
  auto hit = Submit(Spec(1, prompt));
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(*hit, 128);

  ServiceOptions bad = Options(SystemKind::kDualPath, k1P1D);
  bad.store_subdir = "run-p0,..";
  Status s = bad.Validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  bad.store_subdir = "run";
  bad.kv_store_etcd = "127.0.0.1:2379";
  s = bad.Validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("kv_store_cluster"), std::string::npos) << s.ToString();
}

TEST_F(ServiceTest, ResultsFlowToWaitResultsInReportOrder) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  Register1P1D();
  for (uint64_t id = 10; id < 13; ++id) ASSERT_TRUE(Submit(Spec(id, Tokens(70, id))).ok());
  std::vector<uint64_t> assigned;
  while (assigned.size() < 3) {
    auto pe = Fetch(0, {}, kLongWaitMs);
    ASSERT_TRUE(pe.ok());
    for (const auto& a : pe->prefill()) assigned.push_back(a.request().request_id());
  }
  std::sort(assigned.begin(), assigned.end());
  EXPECT_EQ(assigned, (std::vector<uint64_t>{10, 11, 12}));

  // A reader already waiting is woken by the first result.
  v1::WaitResultsReply first;
  std::thread reader([&] { first = WaitResults(0, kLongWaitMs); });
  ASSERT_TRUE(ReportResult(12, true, 0).ok());
  reader.join();
  ASSERT_GE(first.results_size(), 1);
  EXPECT_EQ(first.results(0).result().request_id(), 12u);

  ASSERT_TRUE(ReportResult(10, true, 0).ok());
  ASSERT_TRUE(ReportResult(11, true, 0).ok());
  auto all = WaitResults(0, 0);
  ASSERT_EQ(all.results_size(), 3);
  const uint64_t want[] = {12, 10, 11};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(all.results(i).seq(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(all.results(i).result().request_id(), want[i]);
  }
  EXPECT_EQ(WaitResults(1, 0).results(0).seq(), 2u);
  EXPECT_EQ(WaitResults(3, 0).results_size(), 0);
  // A result for a request nobody submitted is an error.
  EXPECT_EQ(ReportResult(99, true, 0).code(), Code::kNotFound);
}

// A request that no live engine of a role can ever hold fails with a result naming the sizes,
// instead of waiting in sched forever (phase 2 waits for decode HBM that cannot appear).
TEST_F(ServiceTest, RequestNoLiveEngineCanHoldFailsNamingTheSizes) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  Register1P1D();
  auto with_capacity = [](uint32_t engine, int64_t capacity) {
    v1::EngineReport r = Report(engine, 0, capacity);
    r.set_capacity_tokens(capacity);
    return r;
  };
  // Submitted before any capacity is known: queued (it may fit).
  ASSERT_TRUE(Submit(Spec(1, Tokens(300, 1))).ok());
  EXPECT_EQ(WaitResults(0, 0).results_size(), 0);
  // The DE reports 200 tokens: prompt 300 + gen 4 can never fit there.
  ASSERT_TRUE(Fetch(1, {with_capacity(1, 200)}, 0).ok());
  auto r1 = WaitResults(0, kLongWaitMs);
  ASSERT_EQ(r1.results_size(), 1);
  EXPECT_EQ(r1.results(0).result().request_id(), 1u);
  EXPECT_FALSE(r1.results(0).result().ok());
  EXPECT_NE(r1.results(0).result().error().find(
                "needs 304 tokens of decode engine buffer (prompt 300 + gen 4)"),
            std::string::npos)
      << r1.results(0).result().error();
  EXPECT_NE(r1.results(0).result().error().find("holds 200"), std::string::npos);

  // One that fits is scheduled as usual.
  ASSERT_TRUE(Submit(Spec(2, Tokens(100, 2))).ok());
  auto pe = Fetch(0, {with_capacity(0, 1000)}, kLongWaitMs);
  ASSERT_TRUE(pe.ok());
  ASSERT_EQ(pe->prefill_size(), 1);
  EXPECT_EQ(pe->prefill(0).request().request_id(), 2u);

  // With every capacity known, an oversized prompt fails at once (prefill side named first).
  ASSERT_TRUE(Submit(Spec(3, Tokens(1500, 3))).ok());
  auto all = WaitResults(0, 0);
  ASSERT_EQ(all.results_size(), 2);
  EXPECT_EQ(all.results(1).result().request_id(), 3u);
  EXPECT_FALSE(all.results(1).result().ok());
  EXPECT_NE(all.results(1).result().error().find(
                "needs 1500 tokens of prefill engine buffer (prompt 1500) but the largest live "
                "prefill engine holds 1000"),
            std::string::npos)
      << all.results(1).result().error();
  EXPECT_EQ(server_->service().stats().failed, 2);
}

TEST_F(ServiceTest, FailedAttemptIsResubmittedThenForwardedAsFailed) {
  ServiceOptions o = Options(SystemKind::kDualPath, k1P1D);
  o.max_attempts = 2;
  Start(o);
  Register1P1D();
  ASSERT_TRUE(Submit(Spec(5, Tokens(70, 1))).ok());
  auto first = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->prefill_size(), 1);
  EXPECT_EQ(first->prefill(0).attempt(), 0u);

  ASSERT_TRUE(ReportResult(5, false, 0).ok());
  // The retry waits until both engines of the failed attempt fetch again (a dead one would not).
  auto pe_only = Fetch(0, {}, 0);
  ASSERT_TRUE(pe_only.ok());
  EXPECT_EQ(pe_only->prefill_size(), 0);
  ASSERT_TRUE(Fetch(1, {}, 0).ok());
  auto second = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->prefill_size(), 1);
  EXPECT_EQ(second->prefill(0).request().request_id(), 5u);
  EXPECT_EQ(second->prefill(0).attempt(), 1u);
  EXPECT_EQ(WaitResults(0, 0).results_size(), 0);

  // A late report of the superseded attempt changes nothing.
  ASSERT_TRUE(ReportResult(5, true, 0).ok());
  EXPECT_EQ(WaitResults(0, 0).results_size(), 0);
  EXPECT_EQ(server_->service().stats().stale_results, 1);

  // Attempts exhausted: the failure reaches the replayer.
  ASSERT_TRUE(ReportResult(5, false, 1).ok());
  auto res = WaitResults(0, kLongWaitMs);
  ASSERT_EQ(res.results_size(), 1);
  EXPECT_FALSE(res.results(0).result().ok());
  EXPECT_EQ(res.results(0).result().attempt(), 1u);
  EXPECT_EQ(res.results(0).result().error(), "injected failure");
}

// A decode engine in a long poll is told to fetch again (its poll ends early) so that a deferred
// retry proceeds after one round trip. The DE's poll wait is longer than the test's CTest timeout:
// without the early end this test would time out.
TEST_F(ServiceTest, FailedAttemptPingsTheDecodeEnginesPoll) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  Register1P1D();
  constexpr uint32_t kForever = 600000;
  std::vector<v1::Assignment> decode_seen;
  std::thread de([&] {
    // Polls until it has been told to decode attempt 1 of request 5.
    for (;;) {
      auto r = Fetch(1, {Report(1, 0)}, kForever);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (const auto& a : r->decode()) decode_seen.push_back(a);
      if (!decode_seen.empty() && decode_seen.back().attempt() == 1) return;
    }
  });
  ASSERT_TRUE(Submit(Spec(5, Tokens(70, 1))).ok());
  auto first = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->prefill_size(), 1);
  ASSERT_TRUE(ReportResult(5, false, 0).ok());
  // The PE fetches again (its own proof of life); the DE's proof comes from its loop.
  auto second = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->prefill_size(), 1);
  EXPECT_EQ(second->prefill(0).attempt(), 1u);
  de.join();
  ASSERT_EQ(decode_seen.size(), 2u);
  EXPECT_EQ(decode_seen[0].attempt(), 0u);
  EXPECT_EQ(decode_seen[1].request().request_id(), 5u);
}

// Acceptance 4's path: the DE is killed, the PE reports the request failed at once; the retry waits
// until liveness declares the DE dead and then goes to the surviving DE, without using up attempts
// on the dead one.
TEST_F(ServiceTest, FailureReportedForAKilledDecodeEngineWaitsThenGoesToTheSurvivor) {
  ServiceOptions o =
      Options(SystemKind::kDualPath, "p0.0:prefill:p0,d0.0:decode:d0,d1.0:decode:d1");
  o.max_attempts = 2;
  Start(o);
  ASSERT_TRUE(Register("p0.0", v1::ROLE_PREFILL, "p0").ok());
  ASSERT_TRUE(Register("d0.0", v1::ROLE_DECODE, "d0").ok());
  ASSERT_TRUE(Register("d1.0", v1::ROLE_DECODE, "d1").ok());
  ASSERT_TRUE(Submit(Spec(1, Tokens(80, 1))).ok());
  auto pe = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(pe.ok());
  ASSERT_EQ(pe->prefill_size(), 1);
  ASSERT_EQ(pe->prefill(0).decode_engine(), 1u);
  ASSERT_TRUE(ReportResult(1, false, 0).ok());  // StartDecode to d0 failed: d0 is gone
  auto waiting = Fetch(0, {}, 0);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->prefill_size(), 0);
  clock_.Advance(2 * kNanosPerSecond);
  ASSERT_TRUE(Fetch(0, {}, 0).ok());
  ASSERT_TRUE(Fetch(2, {}, 0).ok());
  clock_.Advance(2 * kNanosPerSecond);
  auto retry = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(retry.ok());
  ASSERT_EQ(retry->prefill_size(), 1);
  EXPECT_EQ(retry->prefill(0).attempt(), 1u);
  EXPECT_EQ(retry->prefill(0).decode_engine(), 2u);
  ASSERT_TRUE(ReportResult(1, true, 1).ok());
  auto res = WaitResults(0, kLongWaitMs);
  ASSERT_EQ(res.results_size(), 1);
  EXPECT_TRUE(res.results(0).result().ok());
}

TEST_F(ServiceTest, DeadDecodeEngineRequestsAreResubmittedToTheSurvivor) {
  ServiceOptions o =
      Options(SystemKind::kDualPath, "p0.0:prefill:p0,d0.0:decode:d0,d1.0:decode:d1");
  o.heartbeat_s = 1.0;
  Start(o);
  ASSERT_TRUE(Register("p0.0", v1::ROLE_PREFILL, "p0").ok());
  ASSERT_TRUE(Register("d0.0", v1::ROLE_DECODE, "d0").ok());
  ASSERT_TRUE(Register("d1.0", v1::ROLE_DECODE, "d1").ok());
  ASSERT_TRUE(Submit(Spec(1, Tokens(80, 1))).ok());
  auto pe = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(pe.ok());
  ASSERT_EQ(pe->prefill_size(), 1);
  // Equal load: the tie goes to the lower id.
  const uint32_t victim = pe->prefill(0).decode_engine();
  ASSERT_EQ(victim, 1u);
  const uint32_t survivor = 2;

  // 2 s pass: everybody but the victim fetches.
  clock_.Advance(2 * kNanosPerSecond);
  ASSERT_TRUE(Fetch(0, {}, 0).ok());
  ASSERT_TRUE(Fetch(survivor, {}, 0).ok());
  // 2 s more: the victim has been silent for 4 s > 3 heartbeats; the next fetch (or the server's
  // liveness thread, whichever runs first) declares it dead and re-submits request 1.
  clock_.Advance(2 * kNanosPerSecond);
  auto again = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->prefill_size(), 1);
  EXPECT_EQ(again->prefill(0).request().request_id(), 1u);
  EXPECT_EQ(again->prefill(0).attempt(), 1u);
  EXPECT_EQ(again->prefill(0).decode_engine(), survivor);
  EXPECT_EQ(server_->service().stats().engines_dead, 1);

  const v1::ListEnginesReply engines = ListEngines();
  ASSERT_EQ(engines.alive_size(), 3);
  EXPECT_FALSE(engines.alive(victim));
  EXPECT_TRUE(engines.alive(survivor));

  // The dead engine cannot fetch work any more, and its late result is dropped.
  auto zombie = Fetch(victim, {}, 0);
  EXPECT_EQ(zombie.status().code(), Code::kFailedPrecondition);
  ASSERT_TRUE(ReportResult(1, true, 0).ok());
  EXPECT_EQ(WaitResults(0, 0).results_size(), 0);
  ASSERT_TRUE(ReportResult(1, true, 1).ok());
  auto res = WaitResults(0, kLongWaitMs);
  ASSERT_EQ(res.results_size(), 1);
  EXPECT_EQ(res.results(0).result().attempt(), 1u);

  // New work goes to the survivor only.
  ASSERT_TRUE(Submit(Spec(2, Tokens(80, 2))).ok());
  auto next = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->prefill_size(), 1);
  EXPECT_EQ(next->prefill(0).decode_engine(), survivor);

  // Re-registering brings the engine back into scheduling.
  ASSERT_TRUE(Register("d0.0", v1::ROLE_DECODE, "d0").ok());
  EXPECT_TRUE(Fetch(victim, {}, 0).ok());
}

// The run is finished once every live engine saw shutdown; an engine that died meanwhile does
// not hold it up forever.
TEST_F(ServiceTest, ShutdownFinishesWhenLiveEnginesSawItOrTheRestDied) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  Register1P1D();
  ShutdownRun();
  auto pe = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(pe.ok());
  EXPECT_TRUE(pe->shutdown());
  EXPECT_FALSE(server_->service().Finished());  // d0.0 has not seen it
  clock_.Advance(4 * kNanosPerSecond);
  // Both are silent now (p0.0 left its poll); the server's liveness thread may get there first.
  server_->service().CheckLiveness();
  EXPECT_EQ(server_->service().stats().engines_dead, 2);
  EXPECT_TRUE(server_->service().Finished());
  EXPECT_TRUE(server_->Wait());
}

TEST_F(ServiceTest, BadInputIsInvalidArgumentNamingTheProblem) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  auto expect_bad = [&](const v1::RequestSpec& s, const std::string& needle) {
    auto r = Submit(s);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_bad(Spec(1, {}), "empty prompt");
  std::vector<uint32_t> big = Tokens(10, 1);
  big[4] = 512;
  expect_bad(Spec(1, big), "token 512 at position 4 >= vocab 512");
  expect_bad(Spec(1, Tokens(10, 1), 0), "gen_tokens is 0");
  v1::RequestSpec short_teacher = Spec(1, Tokens(10, 1), 5);
  short_teacher.mutable_teacher()->RemoveLast();
  expect_bad(short_teacher, "teacher has 3 tokens, needs >= gen_tokens - 1 = 4");
  ASSERT_TRUE(Submit(Spec(1, Tokens(10, 1))).ok());
  expect_bad(Spec(1, Tokens(20, 2)), "duplicate request_id 1 with other content");
  // The same request again (a retried Submit) is answered as the first time, not queued twice.
  auto again = Submit(Spec(1, Tokens(10, 1)));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(server_->service().stats().submitted, 1);

  auto unexpected = Register("p9.0", v1::ROLE_PREFILL, "p9");
  EXPECT_EQ(unexpected.status().code(), Code::kInvalidArgument);
  EXPECT_NE(unexpected.status().message().find("p9.0"), std::string::npos);
  auto wrong_role = Register("p0.0", v1::ROLE_DECODE, "p0");
  EXPECT_EQ(wrong_role.status().code(), Code::kInvalidArgument);
  auto unknown_group = Fetch(17, {}, 0);
  // Not bad input: what an engine of a restarted service sees; it registers again.
  EXPECT_EQ(unknown_group.status().code(), Code::kNotFound);
  EXPECT_NE(unknown_group.status().message().find("17"), std::string::npos);
  Register1P1D();
  v1::EngineReport negative = Report(0, -1);
  EXPECT_EQ(Fetch(0, {negative}, 0).status().code(), Code::kInvalidArgument);
}

TEST_F(ServiceTest, CountModeAcceptsThatManyEnginesPerRole) {
  ServiceOptions o = Options(SystemKind::kBasic, k1P1D);
  o.engines.clear();
  o.expect_prefill = 1;
  o.expect_decode = 1;
  Start(o);
  auto d = Register("dx", v1::ROLE_DECODE, "d0");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->engine_id(), 0u);
  EXPECT_FALSE(Register("dy", v1::ROLE_DECODE, "d1").ok());
  auto p = Register("px", v1::ROLE_PREFILL, "p0");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->engine_id(), 1u);
  ASSERT_TRUE(Submit(Spec(3, Tokens(30, 1))).ok());
  auto pe = Fetch(1, {}, kLongWaitMs);
  ASSERT_TRUE(pe.ok());
  ASSERT_EQ(pe->prefill_size(), 1);
  EXPECT_EQ(pe->prefill(0).decode_engine(), 0u);
}

// Fake engines in threads run a whole workload: the PE "completes" what it is assigned, every
// engine exits on shutdown, and the run finishes.
TEST_F(ServiceTest, FakeEnginesRunAWorkloadAndShutDown) {
  Start(Options(SystemKind::kDualPath, "p0.0:prefill:p0,p1.0:prefill:p1,d0.0:decode:d0"));
  ASSERT_TRUE(Register("p0.0", v1::ROLE_PREFILL, "p0").ok());
  ASSERT_TRUE(Register("p1.0", v1::ROLE_PREFILL, "p1").ok());
  ASSERT_TRUE(Register("d0.0", v1::ROLE_DECODE, "d0").ok());
  constexpr int kRequests = 24;
  auto engine = [&](uint32_t id) {
    for (;;) {
      auto r = Fetch(id, {Report(id, 0)}, kLongWaitMs);
      if (!r.ok()) {
        ADD_FAILURE() << r.status().ToString();
        return;
      }
      for (const auto& a : r->prefill()) {
        EXPECT_TRUE(ReportResult(a.request().request_id(), true, a.attempt()).ok());
      }
      if (r->shutdown()) return;
    }
  };
  std::vector<std::thread> engines;
  for (uint32_t id = 0; id < 3; ++id) engines.emplace_back(engine, id);
  for (uint64_t id = 0; id < kRequests; ++id) ASSERT_TRUE(Submit(Spec(id, Tokens(90, id))).ok());
  std::vector<uint64_t> done;
  uint64_t after = 0;
  while (done.size() < kRequests) {
    auto res = WaitResults(after, kLongWaitMs);
    ASSERT_GT(res.results_size(), 0);
    for (const auto& sr : res.results()) {
      EXPECT_TRUE(sr.result().ok());
      done.push_back(sr.result().request_id());
      after = sr.seq();
    }
  }
  std::sort(done.begin(), done.end());
  std::vector<uint64_t> want(kRequests);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(done, want);  // each exactly once
  ShutdownRun();
  for (auto& t : engines) t.join();
  EXPECT_TRUE(server_->service().Finished());
  EXPECT_TRUE(server_->Wait());
  EXPECT_EQ(Submit(Spec(100, Tokens(10, 1))).status().code(), Code::kFailedPrecondition);
}

// The prompt is hashed once, at Submit: every full block's hash (not only up to the first miss)
// travels in the prefill assignment, retries included, and with or without a store to probe.
std::string PackedChain(const std::vector<uint32_t>& prompt, std::string_view seed = "0") {
  const std::vector<kv::BlockHash> chain =
      kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, seed, kBlock)->HashPrefix(prompt);
  return std::string(reinterpret_cast<const char*>(chain.data()),
                     chain.size() * sizeof(kv::BlockHash));
}

TEST_F(ServiceTest, PrefillAssignmentCarriesThePromptsWholeHashChain) {
  ServiceOptions o = Options(SystemKind::kDualPath, k1P1D);
  o.hash_seed = "9";  // the announced seed is the one the chain was hashed with
  Start(o);
  const std::vector<uint32_t> prompt = Tokens(200, 3);  // 3 full blocks of 64 and a tail
  Register1P1D();
  ASSERT_TRUE(Submit(Spec(1, prompt)).ok());
  auto first = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->prefill_size(), 1);
  EXPECT_EQ(first->prefill(0).hit_tokens(), 0);  // a miss at block 0, yet all 3 are carried
  EXPECT_EQ(first->prefill(0).prompt_block_hashes().size(), 3u * 32);
  EXPECT_EQ(first->prefill(0).prompt_block_hashes(), PackedChain(prompt, "9"));
  EXPECT_NE(first->prefill(0).prompt_block_hashes(), PackedChain(prompt, "0"));

  // A retried attempt carries the same chain (nothing is hashed again).
  ASSERT_TRUE(ReportResult(1, false, 0).ok());
  ASSERT_TRUE(Fetch(0, {}, 0).ok());
  ASSERT_TRUE(Fetch(1, {}, 0).ok());
  auto second = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->prefill_size(), 1);
  EXPECT_EQ(second->prefill(0).attempt(), 1u);
  EXPECT_EQ(second->prefill(0).prompt_block_hashes(), PackedChain(prompt, "9"));
}

TEST_F(ServiceTest, WithoutAStoreHitsAreZeroAndTheChainIsStillCarried) {
  ServiceOptions o = Options(SystemKind::kDualPath, k1P1D);
  o.store_root.clear();
  o.store_subdir.clear();
  Start(o);
  const std::vector<uint32_t> prompt = Tokens(130, 4);
  Register1P1D();
  auto hit = Submit(Spec(1, prompt));
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(*hit, 0);
  auto pe = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(pe.ok());
  ASSERT_EQ(pe->prefill_size(), 1);
  EXPECT_EQ(pe->prefill(0).prompt_block_hashes(), PackedChain(prompt));
}

// Issue 17 (service restart): every reply names the incarnation; a new service process on the same
// address has another epoch and none of the old one's state, so an engine's old group id is
// kNotFound (it registers again) and a client can tell its requests were lost.
TEST_F(ServiceTest, RestartedServiceHasANewEpochAndForgetsEverything) {
  const ServiceOptions o = Options(SystemKind::kDualPath, k1P1D);
  Start(o);
  auto p0 = Register("p0.0", v1::ROLE_PREFILL, "p0");
  ASSERT_TRUE(p0.ok()) << p0.status().ToString();
  const uint64_t epoch = p0->service_epoch();
  EXPECT_NE(epoch, 0u);
  v1::SubmitRequest sub;
  *sub.mutable_request() = Spec(1, Tokens(10, 1));
  auto submitted = client_->Submit(sub);
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  EXPECT_EQ(submitted->service_epoch(), epoch);
  EXPECT_EQ(WaitResults(0, 0).service_epoch(), epoch);

  server_.reset();  // the old process is gone; a new one takes its socket
  Start(o);
  EXPECT_NE(WaitResults(0, 0).service_epoch(), epoch);
  auto stale = Fetch(p0->group_id(), {}, 0);
  EXPECT_EQ(stale.status().code(), Code::kNotFound) << stale.status().ToString();
  // The lost request is unknown here: the client re-submits it under the same id.
  ASSERT_TRUE(Submit(Spec(1, Tokens(10, 1))).ok());
  EXPECT_EQ(server_->service().stats().submitted, 1);
}

// --- routing (ServiceOptions::routing, sched/routing.h) ---

constexpr const char* k2P1D = "p0.0:prefill:p0,p1.0:prefill:p1,d0.0:decode:d0";

v1::RequestSpec Turn(uint64_t id, uint64_t agent, uint32_t turn, uint32_t prompt = 100) {
  v1::RequestSpec s = Spec(id, Tokens(prompt, static_cast<uint32_t>(id)));
  s.set_agent_id(agent);
  s.set_turn(turn);
  return s;
}

// Submits one request and lets engine 0, then engine 1 fetch (wait 0: each runs one scheduling
// pass); returns the prefill engine that got it (-1: none). Engine 0 fetching first is what the
// dualpath choice of a 1-engine-per-group service follows: the first free fetcher takes the queue.
class RoutingTest : public ServiceTest {
 protected:
  void Start2P1D(sched::Routing routing) {
    ServiceOptions o = Options(SystemKind::kDualPath, k2P1D);
    o.routing = routing;
    Start(o);
    ASSERT_TRUE(Register("p0.0", v1::ROLE_PREFILL, "p0").ok());
    ASSERT_TRUE(Register("p1.0", v1::ROLE_PREFILL, "p1").ok());
    ASSERT_TRUE(Register("d0.0", v1::ROLE_DECODE, "d0").ok());
  }
  int SubmitAndFetch(const v1::RequestSpec& spec) {
    EXPECT_TRUE(Submit(spec).ok());
    for (uint32_t pe : {0u, 1u}) {
      auto r = Fetch(pe, {}, 0);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok() && r->prefill_size() > 0) {
        EXPECT_EQ(r->prefill_size(), 1);
        EXPECT_EQ(r->prefill(0).prefill_engine(), pe);
        EXPECT_EQ(r->prefill(0).decode_engine(), 2u);  // the DE is chosen as before
        return static_cast<int>(pe);
      }
    }
    return -1;
  }
};

TEST_F(RoutingTest, AnAgentsTurnsAlternateUnderRoundRobinAndStayUnderSticky) {
  const std::pair<sched::Routing, std::vector<int>> cases[] = {
      {sched::Routing::kRoundRobin, {1, 0, 1, 0}},  // (5 + k) mod 2
      {sched::Routing::kSticky, {1, 1, 1, 1}},      // 5 mod 2
      {sched::Routing::kDualPath, {0, 0, 0, 0}},    // today: the first fetcher takes each turn
  };
  for (const auto& [routing, want] : cases) {
    Start2P1D(routing);
    std::vector<int> got;
    for (uint32_t k = 0; k < 4; ++k) got.push_back(SubmitAndFetch(Turn(10 + k, 5, k)));
    EXPECT_EQ(got, want) << sched::RoutingName(routing);
    const ServiceStats st = server_->service().stats();
    EXPECT_EQ(st.routed, routing == sched::Routing::kDualPath ? 0 : 4);
    EXPECT_EQ(st.route_fallbacks, 0);
    server_.reset();
  }
}

TEST_F(RoutingTest, AFixedEngineThatDiesHandsItsQueuedTurnsToTheOther) {
  Start2P1D(sched::Routing::kSticky);
  // Agent 1 is fixed to p1.0; p0.0 fetches and gets nothing.
  ASSERT_TRUE(Submit(Turn(1, 1, 0)).ok());
  auto none = Fetch(0, {}, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->prefill_size(), 0);
  // p1.0 goes silent for more than 3 heartbeats; p0.0 and the DE keep fetching.
  clock_.Advance(2 * kNanosPerSecond);
  ASSERT_TRUE(Fetch(0, {}, 0).ok());
  ASSERT_TRUE(Fetch(2, {}, 0).ok());
  clock_.Advance(2 * kNanosPerSecond);
  auto got = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->prefill_size(), 1);
  EXPECT_EQ(got->prefill(0).request().request_id(), 1u);
  EXPECT_EQ(got->prefill(0).prefill_engine(), 0u);
  EXPECT_EQ(got->prefill(0).attempt(), 0u);  // never assigned before: not a retry
  // Later turns of the agent go to the live engine at once, as fallbacks.
  EXPECT_EQ(SubmitAndFetch(Turn(2, 1, 1)), 0);
  EXPECT_EQ(server_->service().stats().route_fallbacks, 2);
  EXPECT_EQ(server_->service().stats().routed, 0);
}

TEST_F(RoutingTest, AFixedEngineTooSmallForThePromptIsNotUsed) {
  Start2P1D(sched::Routing::kSticky);
  auto with_capacity = [](uint32_t engine, int64_t capacity) {
    v1::EngineReport r = Report(engine, 0);
    r.set_capacity_tokens(capacity);
    return r;
  };
  // Known before the submission: p1.0 holds 200 tokens, agent 1's 300-token prompt goes to p0.0.
  ASSERT_TRUE(Fetch(1, {with_capacity(1, 200)}, 0).ok());
  EXPECT_EQ(SubmitAndFetch(Turn(1, 1, 0, 300)), 0);
  // Learnt after the submission: agent 3 (fixed to p1.0, which now reports 1000 tokens) waits
  // for p1.0 ...
  ASSERT_TRUE(Fetch(1, {with_capacity(1, 1000)}, 0).ok());
  ASSERT_TRUE(Submit(Turn(2, 3, 0, 250)).ok());
  auto waiting = Fetch(0, {}, 0);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->prefill_size(), 0);
  // ... until a report shows p1.0 cannot hold its prompt: then it is anyone's, and p0.0 takes it.
  auto p0 = Fetch(0, {with_capacity(0, 1000), with_capacity(1, 200)}, 0);
  ASSERT_TRUE(p0.ok());
  ASSERT_EQ(p0->prefill_size(), 1);
  EXPECT_EQ(p0->prefill(0).request().request_id(), 2u);
  EXPECT_EQ(server_->service().stats().route_fallbacks, 2);
  EXPECT_EQ(server_->service().stats().routed, 0);
  EXPECT_EQ(server_->service().stats().failed, 0);
}

TEST_F(RoutingTest, ARetryIsNotFixed) {
  Start2P1D(sched::Routing::kSticky);
  EXPECT_EQ(SubmitAndFetch(Turn(1, 1, 0)), 1);
  ASSERT_TRUE(ReportResult(1, false, 0).ok());
  // The retry waits for both engines of the failed attempt to fetch again, then is anyone's:
  // p0.0 fetches first and takes it.
  ASSERT_TRUE(Fetch(1, {}, 0).ok());
  ASSERT_TRUE(Fetch(2, {}, 0).ok());
  auto retry = Fetch(0, {}, 0);
  ASSERT_TRUE(retry.ok());
  ASSERT_EQ(retry->prefill_size(), 1);
  EXPECT_EQ(retry->prefill(0).attempt(), 1u);
  EXPECT_EQ(retry->prefill(0).prefill_engine(), 0u);
  EXPECT_EQ(server_->service().stats().route_fallbacks, 1);
}

// --- data-network liveness: partitions (issue 25 item 9, docs/control.md "Liveness") ---

constexpr const char* k2P2D = "p0.0:prefill:p0,p1.0:prefill:p1,d0.0:decode:d0,d1.0:decode:d1";

// 2P2D under round-robin routing; every engine fetches with the report of its probes of the other
// role, as engines do. One engine's compute link (p1's unless the test says) goes down at
// `down_at_` and up again at `up_at_`: meanwhile nobody's probe of it is answered and its own
// probes are not, while the other three keep reaching each other. Virtual time only: each Tick
// advances the ManualClock and lets every engine fetch once (wait 0), which also runs the service's
// liveness check.
class PartitionTest : public ServiceTest {
 protected:
  static constexpr uint32_t kP0 = 0, kP1 = 1, kD0 = 2, kD1 = 3;

  void Start2P2D() {
    ServiceOptions o = Options(SystemKind::kDualPath, k2P2D);
    o.routing = sched::Routing::kRoundRobin;
    o.heartbeat_s = 1.0;
    Start(o);
    ASSERT_TRUE(Register("p0.0", v1::ROLE_PREFILL, "p0").ok());
    ASSERT_TRUE(Register("p1.0", v1::ROLE_PREFILL, "p1").ok());
    ASSERT_TRUE(Register("d0.0", v1::ROLE_DECODE, "d0").ok());
    ASSERT_TRUE(Register("d1.0", v1::ROLE_DECODE, "d1").ok());
  }

  v1::EngineReport ProbeReport(uint32_t engine) {
    v1::EngineReport r = Report(engine, 0);
    const Nanos now = clock_.Now();
    const bool down = now >= down_at_ && now < up_at_;
    for (uint32_t peer :
         engine < 2 ? std::vector<uint32_t>{kD0, kD1} : std::vector<uint32_t>{kP0, kP1}) {
      v1::PeerReach* p = r.add_reach();
      p->set_engine_id(peer);
      p->set_probing_ms(now / kNanosPerMilli);
      const bool cut = (down && (engine == down_engine_ || peer == down_engine_)) ||
                       (now >= down_at_ && silent_.contains({engine, peer}));
      p->set_ok_age_ms(cut ? (now - down_at_) / kNanosPerMilli : 0);
    }
    return r;
  }

  // Advances the clock by `dt`, then every engine fetches once; returns what each prefill engine
  // was handed.
  std::vector<v1::FetchReply> Tick(Nanos dt) {
    clock_.Advance(dt);
    std::vector<v1::FetchReply> got;
    for (uint32_t e : {kP0, kP1, kD0, kD1}) {
      auto reply = Fetch(e, {ProbeReport(e)}, 0);
      EXPECT_TRUE(reply.ok()) << reply.status().ToString();
      got.push_back(reply.value_or(v1::FetchReply()));
    }
    return got;
  }

  // The attempt's PE reports that it could not move KV with its DE (the engine's code for it).
  Status ReportPeerFailure(uint64_t id, uint32_t attempt) {
    v1::RequestResult r;
    r.set_request_id(id);
    r.set_ok(false);
    r.set_attempt(attempt);
    r.set_error("connect: Network is unreachable");
    r.set_error_code(static_cast<int32_t>(Code::kEnginePeerFailed));
    return client_->ReportResult(r);
  }

  // Ticks `dt` apart, at most `ticks` times, until a prefill engine of `pes` is handed work:
  // that first assignment, or none. The engines of `idle` must be handed nothing meanwhile.
  std::optional<v1::Assignment> TickUntilPrefill(std::initializer_list<uint32_t> pes, int ticks,
                                                 Nanos dt,
                                                 std::initializer_list<uint32_t> idle = {}) {
    std::optional<v1::Assignment> first;
    for (int i = 0; i < ticks && !first; ++i) {
      const std::vector<v1::FetchReply> got = Tick(dt);
      for (uint32_t e : idle) EXPECT_EQ(got[e].prefill_size(), 0) << "engine " << e;
      for (uint32_t pe : pes) {
        if (got[pe].prefill_size() > 0) first = got[pe].prefill(0);
      }
    }
    return first;
  }

  bool Reachable(uint32_t engine) {
    const v1::ListEnginesReply l = ListEngines();
    EXPECT_EQ(l.reachable_size(), 4);
    return l.reachable_size() > static_cast<int>(engine) && l.reachable(engine);
  }

  uint32_t down_engine_ = kP1;  // whose compute link goes down
  Nanos down_at_ = INT64_MAX;
  Nanos up_at_ = INT64_MAX;
  // (reporter, peer): that reporter's pings of that peer stay unanswered from down_at_ on, link
  // up or not (a channel still reconnecting after the link came back).
  std::set<std::pair<uint32_t, uint32_t>> silent_;
};

TEST_F(PartitionTest, FetchCarriesThePeersToProbeWhenTheListChanged) {
  Start2P2D();
  auto pe = Fetch(kP1, {}, 0);
  ASSERT_TRUE(pe.ok());
  ASSERT_NE(pe->peers_version(), 0u);
  ASSERT_EQ(pe->peers_size(), 2);  // the decode engines: the ones a PE moves KV with
  EXPECT_EQ(pe->peers(0).engine_id(), kD0);
  EXPECT_EQ(pe->peers(0).name(), "d0.0");
  EXPECT_EQ(pe->peers(1).engine_id(), kD1);
  EXPECT_FALSE(pe->peers(1).peer_addr().empty());
  auto de = Fetch(kD0, {}, 0);
  ASSERT_TRUE(de.ok());
  ASSERT_EQ(de->peers_size(), 2);
  EXPECT_EQ(de->peers(0).name(), "p0.0");
  // Up to date: no list.
  v1::FetchRequest req;
  req.set_group_id(kP1);
  req.set_peers_version(pe->peers_version());
  auto same = client_->Fetch(req);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->peers_size(), 0);
  EXPECT_EQ(same->peers_version(), 0u);
  // d1 goes silent for more than 3 heartbeats and is declared dead: the list changes.
  clock_.Advance(2 * kNanosPerSecond);
  for (uint32_t e : {kP0, kP1, kD0}) ASSERT_TRUE(Fetch(e, {}, 0).ok());
  clock_.Advance(2 * kNanosPerSecond);
  auto after = client_->Fetch(req);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->peers_version(), pe->peers_version());
  ASSERT_EQ(after->peers_size(), 1);
  EXPECT_EQ(after->peers(0).name(), "d0.0");
  // Probe ages outside their range are refused, naming the field.
  v1::EngineReport bad = Report(kP1, 0);
  bad.add_reach()->set_ok_age_ms(-2);
  auto refused = Fetch(kP1, {bad}, 0);
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("ok_age_ms -2"), std::string::npos)
      << refused.status().ToString();
}

TEST_F(PartitionTest, AnEngineCutOffFromTheComputeNetworkLosesItsWorkWithinThreeHeartbeats) {
  Start2P2D();
  Tick(0);
  // Agent 1's turn 0 is routed to p1 ((1 + 0) mod 2) and handed to it.
  ASSERT_TRUE(Submit(Turn(1, 1, 0)).ok());
  std::vector<v1::FetchReply> got = Tick(500 * kNanosPerMilli);
  ASSERT_EQ(got[kP1].prefill_size(), 1);
  EXPECT_EQ(got[kP1].prefill(0).attempt(), 0u);

  // p1's link goes down at 1 s (its last answered probe). It keeps fetching over the service's
  // socket, so it is alive all along; at 4 s (3 heartbeats) it is not yet cut off ...
  down_at_ = 1 * kNanosPerSecond;
  for (int i = 0; i < 7; ++i) {
    got = Tick(500 * kNanosPerMilli);
    EXPECT_EQ(got[kP0].prefill_size(), 0) << "at " << ToSeconds(clock_.Now()) << " s";
  }
  ASSERT_EQ(clock_.Now(), 4 * kNanosPerSecond);
  EXPECT_TRUE(Reachable(kP1));
  EXPECT_EQ(server_->service().stats().engines_cut_off, 0);
  // ... just past it, it is: its request goes to p0 as the next attempt.
  got = Tick(100 * kNanosPerMilli);
  ASSERT_EQ(got[kP0].prefill_size(), 1);
  EXPECT_EQ(got[kP0].prefill(0).request().request_id(), 1u);
  EXPECT_EQ(got[kP0].prefill(0).attempt(), 1u);
  EXPECT_EQ(got[kP1].prefill_size(), 0);
  const ServiceStats cut = server_->service().stats();
  EXPECT_EQ(cut.engines_cut_off, 1);
  EXPECT_EQ(cut.engines_dead, 0);
  EXPECT_EQ(cut.resubmitted, 1);
  const v1::ListEnginesReply engines = ListEngines();
  EXPECT_TRUE(engines.alive(kP1));
  EXPECT_FALSE(engines.reachable(kP1));
  EXPECT_TRUE(engines.reachable(kD0));
  EXPECT_TRUE(engines.reachable(kD1));

  // Whatever p1's old attempt still reports is stale; the new attempt's result counts.
  ASSERT_TRUE(ReportResult(1, true, 0).ok());
  EXPECT_EQ(server_->service().stats().stale_results, 1);
  ASSERT_TRUE(ReportResult(1, true, 1).ok());
  EXPECT_EQ(WaitResults(0, kLongWaitMs).results_size(), 1);

  // Round-robin skips the cut-off engine: agent 1's turn 2, routed to p1, goes to p0.
  ASSERT_TRUE(Submit(Turn(2, 1, 2)).ok());
  got = Tick(500 * kNanosPerMilli);
  ASSERT_EQ(got[kP0].prefill_size(), 1);
  EXPECT_EQ(got[kP0].prefill(0).request().request_id(), 2u);
  EXPECT_EQ(got[kP1].prefill_size(), 0);
  EXPECT_GE(server_->service().stats().route_fallbacks, 2);

  // The link comes back: the first round of probes, answered both ways between p1 and each
  // decode engine (DataReach::BackSince), takes p1 back, and its routed turns go to it.
  up_at_ = clock_.Now() + 500 * kNanosPerMilli;
  got = Tick(500 * kNanosPerMilli);
  EXPECT_TRUE(Reachable(kP1));
  EXPECT_EQ(server_->service().stats().engines_reconnected, 1);
  ASSERT_TRUE(Submit(Turn(3, 1, 4)).ok());
  got = Tick(100 * kNanosPerMilli);
  EXPECT_EQ(got[kP0].prefill_size(), 0);
  ASSERT_EQ(got[kP1].prefill_size(), 1);
  EXPECT_EQ(got[kP1].prefill(0).request().request_id(), 3u);
  EXPECT_EQ(server_->service().stats().engines_dead, 0);
}

// Issue 25 item 9: the partition's end. d1 and p1 reach each other again, but p1's pings of d0 are
// still unanswered (p1 still has d0 let go of and fails work with it at once): p1 gets no work yet.
// Before, the first answered ping either way took p1 back, and a request given to it then with d0
// was failed at once: an attempt lost after the link came back (a request failed on the testbed).
TEST_F(PartitionTest, ACutOffEngineGetsWorkOnlyOnceItAndEveryPeerAnsweredBothWays) {
  Start2P2D();
  Tick(0);
  down_at_ = 1 * kNanosPerSecond;
  for (int i = 0; i < 9 && Reachable(kP1); ++i) Tick(500 * kNanosPerMilli);
  ASSERT_FALSE(Reachable(kP1));
  silent_ = {{kP1, kD0}};
  up_at_ = clock_.Now() + 500 * kNanosPerMilli;
  for (int i = 0; i < 4; ++i) Tick(500 * kNanosPerMilli);
  EXPECT_FALSE(Reachable(kP1)) << "taken back while its pings of d0 go unanswered";
  // Agent 1's turn 0 is routed to p1 ((1 + 0) mod 2): it falls back to p0.
  ASSERT_TRUE(Submit(Turn(1, 1, 0)).ok());
  std::vector<v1::FetchReply> got = Tick(100 * kNanosPerMilli);
  EXPECT_EQ(got[kP1].prefill_size(), 0);
  ASSERT_EQ(got[kP0].prefill_size(), 1);
  EXPECT_EQ(server_->service().stats().engines_reconnected, 0);
  // p1's ping of d0 is answered: every pair both ways; p1 is back.
  silent_.clear();
  Tick(500 * kNanosPerMilli);
  EXPECT_TRUE(Reachable(kP1));
  EXPECT_EQ(server_->service().stats().engines_reconnected, 1);
}

TEST_F(PartitionTest, TheRequestsOfACutOffDecodeEngineMoveToTheOther) {
  Start2P2D();
  Tick(0);
  // Agent 0's turn 0 goes to p0 ((0 + 0) mod 2) with some decode engine, whose link then dies.
  ASSERT_TRUE(Submit(Turn(1, 0, 0)).ok());
  std::vector<v1::FetchReply> got = Tick(500 * kNanosPerMilli);
  ASSERT_EQ(got[kP0].prefill_size(), 1);
  down_engine_ = got[kP0].prefill(0).decode_engine();
  const uint32_t other = down_engine_ == kD0 ? kD1 : kD0;
  down_at_ = 1 * kNanosPerSecond;
  const std::optional<v1::Assignment> retry = TickUntilPrefill({kP0}, 8, 500 * kNanosPerMilli);
  ASSERT_TRUE(retry.has_value());
  EXPECT_EQ(retry->request().request_id(), 1u);
  EXPECT_EQ(retry->attempt(), 1u);
  EXPECT_EQ(retry->decode_engine(), other);
  EXPECT_FALSE(Reachable(down_engine_));
  EXPECT_TRUE(Reachable(kP0));
  EXPECT_TRUE(Reachable(kP1));
}

// A PE reports a peer failure (kEnginePeerFailed: it could not reach its DE) for a request it got
// while its compute link was already down but before the service cut it off. The retry waits for a
// verdict on that link: had it gone out once both engines fetched again, the PE (failing at once,
// so looking idle) could draw it again and fail it again, each attempt within milliseconds, until
// none was left before the cut-off (replay_store_fault_comp-link failed so, 1 run in ~4). Here the
// cut-off is the verdict, and the retry goes to p0.
TEST_F(PartitionTest, APeerFailureAcrossAPartitionWaitsForTheCutOffInsteadOfBurningAttempts) {
  Start2P2D();
  Tick(0);
  down_at_ = 1 * kNanosPerSecond;
  for (int i = 0; i < 4; ++i) Tick(500 * kNanosPerMilli);
  ASSERT_EQ(clock_.Now(), 2 * kNanosPerSecond);
  ASSERT_TRUE(Reachable(kP1));
  // Agent 1's turn 0 is routed to p1 ((1 + 0) mod 2), whose link is down: it fails at once.
  ASSERT_TRUE(Submit(Turn(1, 1, 0)).ok());
  std::vector<v1::FetchReply> got = Tick(100 * kNanosPerMilli);
  ASSERT_EQ(got[kP1].prefill_size(), 1);
  ASSERT_TRUE(ReportPeerFailure(1, 0).ok());
  // Until the cut-off (just past 4 s) nobody gets it again, though every engine keeps fetching.
  while (clock_.Now() < 4 * kNanosPerSecond) {
    got = Tick(100 * kNanosPerMilli);
    EXPECT_EQ(got[kP0].prefill_size() + got[kP1].prefill_size(), 0)
        << "retried at " << ToSeconds(clock_.Now()) << " s, before any verdict on p1's link";
  }
  const std::optional<v1::Assignment> retry =
      TickUntilPrefill({kP0}, 5, 100 * kNanosPerMilli, /*idle=*/{kP1});
  ASSERT_TRUE(retry.has_value());
  EXPECT_EQ(retry->request().request_id(), 1u);
  EXPECT_EQ(retry->attempt(), 1u);
  EXPECT_FALSE(Reachable(kP1));
  EXPECT_EQ(server_->service().stats().resubmitted, 1);
  EXPECT_EQ(WaitResults(0, 0).results_size(), 0);  // not failed
}

// The same report between engines that still reach each other (the failure was the peer's, not
// the link's: a restarted DE, a refused connection): the next answered probe between them is the
// verdict, long before the reachability window.
TEST_F(PartitionTest, APeerFailureBetweenEnginesThatReachEachOtherIsRetriedAfterTheNextProbe) {
  Start2P2D();
  Tick(0);
  ASSERT_TRUE(Submit(Turn(1, 1, 0)).ok());
  std::vector<v1::FetchReply> got = Tick(100 * kNanosPerMilli);
  ASSERT_EQ(got[kP1].prefill_size(), 1);
  ASSERT_TRUE(ReportPeerFailure(1, 0).ok());
  const std::optional<v1::Assignment> retry = TickUntilPrefill({kP0, kP1}, 3, 100 * kNanosPerMilli);
  ASSERT_TRUE(retry.has_value()) << "no retry within 0.3 s of the failure";
  EXPECT_EQ(retry->request().request_id(), 1u);
  EXPECT_EQ(retry->attempt(), 1u);
}

}  // namespace
}  // namespace dualpath::control

namespace dualpath::control {
namespace {

int64_t RealtimeNowNs() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// docs/metrics.md: the service's metrics count requests by system (ServiceStats), observe one
// latency per request with an ok result (a second ok result of the same request is not counted
// twice), sum the read bytes the results carry, and count RPC errors by method and code.
TEST_F(ServiceTest, MetricsCountRequestsLatenciesBytesAndErrors) {
  metrics::Registry registry;
  ServiceOptions o = Options(SystemKind::kBasic, k1P1D);
  o.metrics = &registry;
  Start(o);
  Register1P1D();
  ASSERT_TRUE(Submit(Spec(7, Tokens(100, 1))).ok());
  // The same request again is an idempotent retry (state_requests.cc), not counted twice; a
  // duplicate id with other content is refused and leaves request 7's submit time alone.
  EXPECT_TRUE(Submit(Spec(7, Tokens(100, 1))).ok());
  EXPECT_EQ(Submit(Spec(7, Tokens(100, 2))).status().code(), Code::kInvalidArgument);
  auto pe = Fetch(0, {}, kLongWaitMs);
  ASSERT_TRUE(pe.ok()) << pe.status().ToString();
  ASSERT_EQ(pe->prefill_size(), 1);

  v1::RequestResult r;
  r.set_request_id(7);
  r.set_ok(true);
  r.set_attempt(0);
  r.add_generated(42);
  r.set_read_bytes_prefill(4096);
  const int64_t now = RealtimeNowNs();
  r.mutable_timing()->set_prefill_start_ns(now);
  r.mutable_timing()->set_first_token_ns(now + 1'000'000);
  r.mutable_timing()->set_done_ns(now + 2'000'000);
  ASSERT_TRUE(client_->ReportResult(r).ok());
  ASSERT_TRUE(client_->ReportResult(r).ok());  // stale: dropped by the state, not counted again
  r.set_request_id(99);
  EXPECT_EQ(client_->ReportResult(r).code(), Code::kNotFound);

  const std::string text = registry.Render();
  for (const std::string want :
       {"dualpath_service_requests_total{system=\"basic\",event=\"submitted\"} 1\n",
        "dualpath_service_requests_total{system=\"basic\",event=\"completed\"} 1\n",
        "dualpath_service_open_requests{system=\"basic\"} 0\n",
        "dualpath_request_ttft_seconds_count{system=\"basic\"} 1\n",
        "dualpath_request_seconds_count{system=\"basic\"} 1\n",
        "dualpath_request_phase_seconds_count{system=\"basic\",phase=\"decode\"} 1\n",
        "dualpath_request_read_bytes_total{system=\"basic\",path=\"pe\"} 4096\n",
        "dualpath_request_read_bytes_total{system=\"basic\",path=\"de\"} 0\n",
        "dualpath_service_rpc_errors_total{system=\"basic\",method=\"Submit\","
        "code=\"kInvalidArgument\"} 1\n",
        "dualpath_service_rpc_errors_total{system=\"basic\",method=\"ReportResult\","
        "code=\"kNotFound\"} 1\n",
        "dualpath_process_info{system=\"basic\",kind=\"service\",name=\"service\"} 1\n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing " << want << "in\n" << text;
  }
  server_.reset();  // the service's metrics unregister before `registry` goes
}

// Issue 25 item 7: the service took a request of any size (a 256 MiB Submit was buffered and
// parsed whole: 20 -> 277 MiB). Now one above kMaxSchedulerRequestBytes is refused with
// RESOURCE_EXHAUSTED, from a client process of its own, and costs the service at most its transport
// quota of memory.
TEST_F(ServiceTest, OverLimitRequestIsRefusedWithoutTheServiceGrowing) {
  Start(Options(SystemKind::kDualPath, k1P1D));
  // 512 MiB: the service's limit (16 MiB) gives it a 48 MiB transport quota; twice the 256 MiB of
  // the issue keeps the bound (half the request) clear of the quota plus ASan's overheads.
  constexpr int64_t kBytes = int64_t{512} << 20;
  const oversize::Measured m = oversize::SendMeasured(
      "control", server_->address(), "/dualpath.control.v1.Scheduler/Submit", 1, kBytes);
  EXPECT_EQ(m.call.code, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)) << m.call.output;
  if (oversize::kPeakIsTheServers) {
    EXPECT_LT(m.peak - m.before, kBytes / 2);
  }
  // The service goes on answering.
  EXPECT_TRUE(client_->ListEngines().ok());
  // A request within the limit but beyond the protocol's token bound is bad input, named.
  v1::RequestSpec spec;
  spec.set_request_id(9);
  spec.set_gen_tokens(2);
  spec.mutable_prompt()->Resize(static_cast<int>(kMaxRequestTokens), 1);
  spec.add_teacher(1);
  const Status bad = ValidateRequest(spec, 4096);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("more than kMaxRequestTokens"), std::string::npos) << bad.ToString();
}

}  // namespace
}  // namespace dualpath::control
