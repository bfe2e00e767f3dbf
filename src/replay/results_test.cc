#include "dualpath/replay/results.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dualpath::replay {
namespace {

RequestRecord Rec(uint64_t id, double ttft_s, uint32_t gen, bool ok = true) {
  RequestRecord r;
  r.request_id = id;
  r.gen_tokens = gen;
  r.prompt_tokens = 100;
  r.submit_ns = 1'000 * kNanosPerSecond;
  r.result_ns = r.submit_ns + kNanosPerSecond;
  r.result.set_request_id(id);
  r.result.set_ok(ok);
  pb::Timing* t = r.result.mutable_timing();
  t->set_submitted_ns(r.submit_ns);
  t->set_prefill_start_ns(r.submit_ns + 1);
  t->set_first_token_ns(r.submit_ns + FromSeconds(ttft_s));
  t->set_second_token_ns(t->first_token_ns() + 2 * kNanosPerMilli);
  t->set_done_ns(t->first_token_ns() + 2 * kNanosPerMilli * (gen - 1));
  return r;
}

TEST(ResultsTest, SummarizeSkipsFailedRequests) {
  ReplayResult r;
  r.start_ns = 1'000 * kNanosPerSecond;
  r.end_ns = r.start_ns + 5 * kNanosPerSecond;
  r.records = {Rec(1, 0.1, 5), Rec(2, 0.3, 5), Rec(3, 9.0, 5, false), Rec(4, 0.2, 1)};
  const Summary s = Summarize(r);
  EXPECT_DOUBLE_EQ(s.jct_s, 5.0);
  EXPECT_EQ(s.requests, 4u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_NEAR(s.ttft_p50_s, 0.2, 1e-9);
  EXPECT_NEAR(s.ttft_p99_s, 0.3, 1e-9);
  EXPECT_NEAR(s.ttft_mean_s, 0.2, 1e-9);
  EXPECT_NEAR(s.ttst_s, 0.002, 1e-9);  // gen == 1 has no second token
  EXPECT_NEAR(s.ttst_p50_s, 0.002, 1e-9);
  EXPECT_NEAR(s.tpot_s, 0.002, 1e-9);
}

// A request decoded on `engine` from start_s to done_s (seconds after r.start_ns = 1000 s), ready
// ready_s before its start and first token 10 ms before that.
RequestRecord Decoded(uint64_t id, uint32_t engine, double start_s, double done_s,
                      double ready_s = 0.005) {
  RequestRecord r = Rec(id, 0.1, 4);
  r.result.set_decode_engine(engine);
  pb::Timing* t = r.result.mutable_timing();
  const Nanos t0 = 1'000 * kNanosPerSecond;
  t->set_decode_start_ns(t0 + FromSeconds(start_s));
  t->set_decode_ready_ns(t->decode_start_ns() - FromSeconds(ready_s));
  t->set_first_token_ns(t->decode_ready_ns() - 10 * kNanosPerMilli);
  t->set_done_ns(t0 + FromSeconds(done_s));
  return r;
}

TEST(ResultsTest, DecodeBatchesCountRequestsInDecodeOverTime) {
  ReplayResult r;
  r.start_ns = 1'000 * kNanosPerSecond;
  r.end_ns = r.start_ns + 10 * kNanosPerSecond;
  // Engine 1: [1, 3) and [2, 4) overlap in [2, 3); request 3 is taken in at 4, the moment 2
  // retires (retired first: never counted as a batch of 2). Engine 2: one request. A failed
  // request and one with gen 1 (no step) do not count.
  RequestRecord failed = Decoded(5, 1, 0.5, 9.0);
  failed.result.set_ok(false);
  RequestRecord one_token = Decoded(6, 1, 0.5, 9.0);
  one_token.gen_tokens = 1;
  r.records = {Decoded(1, 1, 1.0, 3.0),
               Decoded(2, 1, 2.0, 4.0),
               Decoded(3, 1, 4.0, 5.0),
               Decoded(4, 2, 1.0, 1.5, 0.5),
               failed,
               one_token};
  const std::vector<DecodeBatchSeries> b = DecodeBatches(r);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].decode_engine, 1u);
  EXPECT_EQ(b[0].t_s, (std::vector<double>{1.0, 2.0, 3.0, 4.0, 5.0}));
  EXPECT_EQ(b[0].batch, (std::vector<uint32_t>{1, 2, 1, 1, 0}));
  EXPECT_NEAR(b[0].busy_s, 4.0, 1e-9);
  ASSERT_EQ(b[0].time_share.size(), 3u);
  EXPECT_NEAR(b[0].time_share[1], 0.75, 1e-9);
  EXPECT_NEAR(b[0].time_share[2], 0.25, 1e-9);
  EXPECT_NEAR(b[0].mean, 1.25, 1e-9);
  EXPECT_EQ(b[0].max, 2u);
  EXPECT_EQ(b[1].batch, (std::vector<uint32_t>{1, 0}));
  EXPECT_NEAR(b[1].mean, 1.0, 1e-9);
  // TTST's pieces: handoff 10 ms for all; decode wait 5 ms for three of the four ok, 0.5 s once.
  const Summary s = Summarize(r);
  EXPECT_NEAR(s.handoff_p50_s, 0.010, 1e-9);
  EXPECT_NEAR(s.decode_wait_p50_s, 0.005, 1e-9);
  // Ready -> second token (Rec's second token is 2 ms after the first token, which Decoded puts
  // 10 ms before ready: negative, so not stamped in order and left out). Set one properly.
  EXPECT_EQ(s.de_ttst_p50_s, 0);
  r.records[0].result.mutable_timing()->set_second_token_ns(
      r.records[0].result.timing().decode_start_ns() + 3 * kNanosPerMilli);
  EXPECT_NEAR(Summarize(r).de_ttst_p50_s, 0.008, 1e-9);  // 5 ms wait + 3 ms step
  // In the JSON, per result.
  SystemRun run;
  run.system = "dualpath";
  run.replay = r;
  const nlohmann::json j = nlohmann::json::parse(RunJson("{}", {run}));
  const nlohmann::json& d = j["results"][0]["decode_batches"];
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0]["batch"], nlohmann::json({1, 2, 1, 1, 0}));
  EXPECT_EQ(d[0]["max"], 2);
  EXPECT_NEAR(j["results"][0]["records"][3]["decode_wait_s"].get<double>(), 0.5, 1e-9);
  EXPECT_NEAR(j["results"][0]["decode_wait_p50_s"].get<double>(), 0.005, 1e-9);
  // Records without the decode stamps (an engine from before them) give no series.
  r.records = {Rec(1, 0.1, 4)};
  EXPECT_TRUE(DecodeBatches(r).empty());
}

TEST(ResultsTest, LinkUsageAgainstGoodput) {
  const Nanos t0 = 1'000 * kNanosPerSecond;
  LinkSample before{t0, {0, 100}, {0, 0}};
  LinkSample after{t0 + 10 * kNanosPerSecond, {50'000'000, 25'000'100}, {7, 9}};
  // Steady window [2 s, 6 s]: node 0 reads 4e7 bytes in 4 s = 80 Mbit/s.
  std::vector<LinkSample> samples;
  for (int s = 0; s <= 10; ++s) {
    samples.push_back(
        {t0 + s * kNanosPerSecond,
         {static_cast<uint64_t>(s) * 5'000'000, 100 + static_cast<uint64_t>(s) * 2'500'000},
         {0, 0}});
  }
  std::vector<LinkUsage> u =
      ComputeLinkUsage({"p0", "d0"}, {"prefill", "decode"}, before, after, samples, {100e6, 100e6},
                       t0 + 2 * kNanosPerSecond, t0 + 6 * kNanosPerSecond);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].rx_bytes, 50'000'000u);
  EXPECT_EQ(u[1].tx_bytes, 9u);
  EXPECT_NEAR(u[0].utilization, 0.4, 1e-9);  // 4e8 bits / 10 s / 1e8
  EXPECT_NEAR(u[1].utilization, 0.2, 1e-9);
  EXPECT_NEAR(u[0].steady_utilization, 0.4, 1e-9);
  EXPECT_NEAR(u[0].steady_seconds, 4.0, 1e-9);
  // No steady window: zero, not garbage.
  u = ComputeLinkUsage({"p0", "d0"}, {"prefill", "decode"}, before, after, samples, {100e6, 100e6},
                       0, 0);
  EXPECT_EQ(u[0].steady_utilization, 0);
}

TEST(ResultsTest, JsonHasSimSchemaFieldsAndRecords) {
  SystemRun basic;
  basic.system = "basic";
  basic.replay.start_ns = 1'000 * kNanosPerSecond;
  basic.replay.end_ns = basic.replay.start_ns + 4 * kNanosPerSecond;
  basic.replay.records = {Rec(1, 0.1, 4), Rec(2, 0.2, 4)};
  basic.mismatches = 1;
  basic.mismatched_ids = {2};
  basic.links = {LinkUsage{.node = "p0", .role = "prefill", .rx_bytes = 10, .utilization = 0.9}};
  SystemRun oracle = basic;
  oracle.system = "oracle";
  oracle.mismatches.reset();
  oracle.replay.end_ns = basic.replay.start_ns + 2 * kNanosPerSecond;
  const std::string text = RunJson(R"({"online": false, "x": 1})", {basic, oracle});
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["config"]["x"], 1);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const char* key :
       {"system", "mode", "jct_s", "ttft_p50_s", "ttft_p99_s", "ttst_s", "ttst_p50_s", "tpot_s",
        "requests", "mismatches", "storage_links", "records"}) {
    EXPECT_TRUE(j["results"][0].contains(key)) << key;
  }
  EXPECT_EQ(j["results"][0]["mismatches"], 1);
  EXPECT_TRUE(j["results"][1]["mismatches"].is_null());
  EXPECT_DOUBLE_EQ(j["results"][0]["jct_s"].get<double>(), 4.0);
  EXPECT_EQ(j["results"][0]["storage_links"][0]["node"], "p0");
  EXPECT_EQ(j["results"][0]["records"][1]["mismatch"], true);
  EXPECT_EQ(j["results"][0]["records"][0]["mismatch"], false);
  EXPECT_TRUE(j["results"][1]["records"][0]["mismatch"].is_null());
  const std::string table = RunTable({basic, oracle});
  EXPECT_NE(table.find("basic"), std::string::npos);
  EXPECT_NE(table.find("0.50x"), std::string::npos);  // oracle JCT 2 s vs basic 4 s
  EXPECT_NE(table.find("p0"), std::string::npos);
}

TEST(ResultsTest, KilledEngineBuffersInJson) {
  SystemRun run;
  run.system = "dualpath";
  run.killed_engine = "d1";
  BufferReclaim b;
  b.pool = "/dev/shm/dualpath-dp-d1.pool";
  b.root = "engine/d1.0";
  b.root_bytes = 256ull << 20;
  b.owner_pid = 42;
  b.root_after = false;
  b.reclaimed_roots = 1;
  run.killed_buffers = b;
  SystemRun other = run;
  other.killed_buffers->root_after = true;  // still there: not reclaimed
  SystemRun plain;
  plain.system = "basic";
  const nlohmann::json j = nlohmann::json::parse(RunJson("{}", {run, other, plain}));
  const nlohmann::json& k = j["results"][0]["killed_engine_buffers"];
  EXPECT_EQ(k["root"], "engine/d1.0");
  EXPECT_EQ(k["root_bytes"], 256ull << 20);
  EXPECT_EQ(k["reclaimed"], true);
  EXPECT_EQ(j["results"][1]["killed_engine_buffers"]["reclaimed"], false);
  EXPECT_TRUE(j["results"][2]["killed_engine_buffers"].is_null());
  // Reclaimed needs all three: the root was seen, is gone, and a sweep dropped a root.
  b.reclaimed_roots = 0;
  EXPECT_FALSE(b.reclaimed());
  b.reclaimed_roots = 1;
  b.root_bytes = 0;
  EXPECT_FALSE(b.reclaimed());
}

// `--store` (docs/store.md "In the system"): the store's report is a result's `kv_store` object;
// a run without a store has no such key (its JSON is as before), and a report that is not JSON
// becomes null rather than invalid output.
TEST(ResultsTest, KvStoreReportOnlyWithAStore) {
  SystemRun with;
  with.system = "dualpath";
  with.kv_store_json = R"({"hits_local": 3, "master": {"usage": [{"node": 1, "dram_used": 7}]}})";
  SystemRun without;
  without.system = "basic";
  SystemRun broken = with;
  broken.kv_store_json = "{not json";
  const nlohmann::json j = nlohmann::json::parse(RunJson("{}", {with, without, broken}));
  EXPECT_EQ(j["results"][0]["kv_store"]["hits_local"], 3);
  EXPECT_EQ(j["results"][0]["kv_store"]["master"]["usage"][0]["dram_used"], 7);
  EXPECT_FALSE(j["results"][1].contains("kv_store"));
  EXPECT_TRUE(j["results"][2]["kv_store"].is_null());
}

}  // namespace
}  // namespace dualpath::replay
