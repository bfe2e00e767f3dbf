#include "dualpath/sim/config.h"

#include <gtest/gtest.h>

namespace dualpath::sim {
namespace {

TEST(SimConfigTest, DefaultsAreValid) { EXPECT_TRUE(SimConfig{}.Validate().ok()); }

TEST(SimConfigTest, JsonOverridesOnlyWhatItNames) {
  auto c = ParseSimConfig(R"({"hardware": {"snic_gbps": 200}, "engine": {"pe_ep_nodes": 1},
                              "sched": {"fetch_interval_ms": 5}, "snic_window_s": 2})",
                          "test");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->hw.snic_gbps, 200);
  EXPECT_EQ(c->engine.pe_ep_nodes, 1u);
  EXPECT_DOUBLE_EQ(c->sched.fetch_interval_ms, 5);
  EXPECT_DOUBLE_EQ(c->snic_window_s, 2);
  EXPECT_DOUBLE_EQ(c->hw.cnic_gbps, SimConfig{}.hw.cnic_gbps);
}

TEST(SimConfigTest, SloDefaultsToThePapersAndIsConfigurable) {
  EXPECT_DOUBLE_EQ(SimConfig{}.slo.ttft_mean_s, 4.0);  // §7.4
  EXPECT_DOUBLE_EQ(SimConfig{}.slo.tpot_mean_s, 0.050);
  auto c = ParseSimConfig(R"({"slo": {"ttft_mean_s": 2.5}})", "test");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->slo.ttft_mean_s, 2.5);
  EXPECT_DOUBLE_EQ(c->slo.tpot_mean_s, 0.050);
  EXPECT_NE(SimConfigToJson(*c).find(R"("slo":{"tpot_mean_s":0.05,"ttft_mean_s":2.5})"),
            std::string::npos)
      << SimConfigToJson(*c);
  auto bad = ParseSimConfig(R"({"slo": {"tpot_mean_s": 0}})", "test");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("slo.tpot_mean_s = 0 is outside"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ParseSimConfig(R"({"slo": {"ttft_p99_s": 1}})", "test").ok());
}

TEST(SimConfigTest, RoundTripsThroughJson) {
  SimConfig a;
  a.engine.linear_efficiency = 0.33;
  a.hw.gpus_per_node = 4;
  a.slo.tpot_mean_s = 0.04;
  auto b = ParseSimConfig(SimConfigToJson(a), "roundtrip");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(SimConfigToJson(*b), SimConfigToJson(a));
}

TEST(SimConfigTest, ErrorsNameTheProblem) {
  struct Case {
    const char* json;
    const char* want;
  };
  for (const Case& c : {
           Case{R"({"hardware": {"snic_gbsp": 1}})", "hardware.snic_gbsp"},
           Case{R"({"nope": 1})", "unknown key nope"},
           Case{R"({"engine": {"pe_ep_nodes": 1.5}})", "engine.pe_ep_nodes: expected an integer"},
           Case{R"({"engine": {"pe_ep_nodes": -1}})",
                "engine.pe_ep_nodes = -1 is outside [1, 4096]"},
           Case{R"({"hardware": {"snic_gbps": "fast"}})", "expected a number"},
           Case{R"({"hardware": {"snic_efficiency": 1.5}})",
                "hardware.snic_efficiency = 1.5 is outside [0.01, 1]"},
           // Issue 19: a rate near 0 made simulated time, and the metric windows, unbounded.
           Case{R"({"hardware": {"snic_gbps": 1e-9}})",
                "hardware.snic_gbps = 1e-09 is outside [0.01, 10000] Gbit/s"},
           Case{R"({"sched": {"fetch_interval_ms": 0}})", "sched.fetch_interval_ms = 0 is outside"},
           Case{R"({"snic_window_s": 1e-300})", "snic_window_s = 1e-300 is outside"},
           Case{R"({"engine": {"weight_bytes_per_param": 0}})",
                "engine.weight_bytes_per_param = 0"},
           // An integer too large for the field is rejected, not wrapped into a small one.
           Case{R"({"hardware": {"gpus_per_node": 4294967304}})",
                "hardware.gpus_per_node = 4294967304 is outside [1, 64]"},
           // A number no double holds is a JSON error, not an exception.
           Case{R"({"hardware": {"snic_gbps": 1e999}})", "bad JSON"},
           Case{R"({"engine": {"de_hbm_reserved_gb": 90}})", "below hardware.hbm_gb"},
           Case{R"({"hardware": 3})", "expected a JSON object"},
           Case{R"([1, 2])", "expected a JSON object"},
           Case{R"({"hardware": )", "bad JSON"},
       }) {
    auto r = ParseSimConfig(c.json, "cfg.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), Code::kSimBadConfig) << c.json;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.json << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find("cfg.json"), std::string::npos);
  }
}

TEST(SimConfigTest, NumberBeyondDoubleIsAnErrorNotAnException) {
  // nlohmann throws out_of_range (not parse_error) for 1e999 while parsing.
  auto r = ParseSimConfig(R"({"hardware": {"snic_gbps": 1e999}})", "cfg.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kSimBadConfig);
  EXPECT_NE(r.status().message().find("cfg.json: bad JSON: number out of range"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("[json.exception"), std::string::npos);
}

TEST(SimConfigTest, NonRegularFileIsRefused) {
  for (const char* path : {"/dev/zero", "/"}) {
    auto r = LoadSimConfig(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << path;
    EXPECT_NE(r.status().message().find("is not a regular file"), std::string::npos)
        << r.status().message();
  }
}

TEST(SimConfigTest, MissingFileIsBadInput) {
  auto r = LoadSimConfig("/nonexistent/sim.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::sim

namespace dualpath::sim {
namespace {

kv::ModelGeometry Model(const char* name) {
  auto m = kv::FindModel(name);
  EXPECT_TRUE(m.ok());
  return *m;
}

TEST(ResolveEngineTest, Ds660bOn2P4DGivesTheCalibratedConstants) {
  auto r = ResolveEngine(SimConfig{}, Model("ds660b"), 2, 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const EngineConfig& e = r->engine;
  EXPECT_DOUBLE_EQ(e.weight_bytes_per_param, 1.0);  // MoE: FP8
  // docs/sim.md "Prefill and decode HBM, line by line": routed experts 653.9 GB over the EP
  // group, 16.1 GB of other FP8 weights and 3.7 GB of BF16 embeddings on every GPU.
  EXPECT_NEAR(e.pe_hbm_reserved_gb, 653.909 / 16 + 16.116 + 3.707 + 6, 0.01);  // 66.69
  EXPECT_NEAR(e.de_hbm_reserved_gb, 653.909 / 32 + 16.116 + 3.707 + 2, 0.01);  // 42.26
  // A decode step reads all of it but the input embedding table (1.85 GB).
  EXPECT_NEAR(e.decode_weight_gb, 653.909 / 32 + 16.116 + 1.853, 0.01);  // 38.40
  EXPECT_NEAR(e.decode_overhead_ms, 61 * (25 + 318) * 1e-3, 1e-9);       // 20.92
  EXPECT_EQ(e.pe_ep_nodes, 2u);
  EXPECT_EQ(e.de_ep_nodes, 4u);
}

TEST(ResolveEngineTest, OnlyRoutedExpertsAreDividedByExpertParallelism) {
  // The replicated part of a GPU's weights does not shrink with a larger EP group; the routed
  // experts' share does.
  const kv::ModelGeometry m = Model("ds660b");
  auto small = ResolveEngine(SimConfig{}, m, 2, 4);  // PE EP16
  SimConfig wide;
  wide.engine.pe_ep_nodes = 4;
  auto large = ResolveEngine(wide, m, 4, 4);  // PE EP32
  ASSERT_TRUE(small.ok() && large.ok());
  const double routed_gb = m.params_routed_experts / 1e9;
  EXPECT_NEAR(small->engine.pe_hbm_reserved_gb - large->engine.pe_hbm_reserved_gb,
              routed_gb / 16 - routed_gb / 32, 1e-6);
  // A MoE model JSON without params_routed_experts keeps the older rule: all of it divided.
  kv::ModelGeometry legacy = m;
  legacy.params_routed_experts = 0;
  auto old = ResolveEngine(SimConfig{}, legacy, 2, 4);
  ASSERT_TRUE(old.ok());
  EXPECT_NEAR(old->engine.pe_hbm_reserved_gb, m.params_total / 1e9 / 16 + 6, 0.01);
}

TEST(ResolveEngineTest, SmallMoeOnOneNodeShardsOverThatNode) {
  auto r = ResolveEngine(SimConfig{}, Model("ds27b"), 1, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Routed experts 24.63 GB over 8 GPUs, 1.91 GB of other weights, LM head 0.66 GB (BF16).
  EXPECT_NEAR(r->engine.decode_weight_gb, 24.631 / 8 + 1.905 + 0.662, 0.01);
  EXPECT_LT(r->engine.decode_overhead_ms, 21.0 / 2);  // 30 layers instead of 61
}

TEST(ResolveEngineTest, DenseModelRunsDataParallelWithAFullBf16Replica) {
  auto r = ResolveEngine(SimConfig{}, Model("qwen2.5-32b"), 1, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const EngineConfig& e = r->engine;
  EXPECT_DOUBLE_EQ(e.weight_bytes_per_param, 2.0);
  EXPECT_EQ(e.pe_ep_nodes, 1u);
  EXPECT_EQ(e.de_ep_nodes, 1u);
  // A full BF16 replica, all replicated; a step reads it but the input embedding (1.56 GB).
  EXPECT_NEAR(e.decode_weight_gb, 65.53 - 1.557, 0.01);
  EXPECT_NEAR(e.de_hbm_reserved_gb, 65.53 + SimConfig{}.engine.dp_workspace_gb, 0.01);
  EXPECT_LT(e.decode_overhead_ms, 5.0);  // no all-to-all
}

TEST(ResolveEngineTest, ExplicitValuesAreKeptAndOversizedWeightsRejected) {
  SimConfig c;
  c.engine.decode_weight_gb = 7;
  c.engine.decode_overhead_ms = 3;
  auto r = ResolveEngine(c, Model("ds660b"), 2, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->engine.decode_weight_gb, 7);
  EXPECT_DOUBLE_EQ(r->engine.decode_overhead_ms, 3);
  // A dense model in FP32 on one GPU: 131 GB of weights cannot fit in 80 GB.
  c.engine.weight_bytes_per_param = 4;
  auto bad = ResolveEngine(c, Model("qwen2.5-32b"), 1, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kSimBadConfig);
  EXPECT_NE(bad.status().message().find("hbm_gb"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::sim
