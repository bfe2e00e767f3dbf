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

TEST(SimConfigTest, RoundTripsThroughJson) {
  SimConfig a;
  a.engine.linear_efficiency = 0.33;
  a.hw.gpus_per_node = 4;
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
           Case{R"({"engine": {"pe_ep_nodes": -1}})", "must not be negative"},
           Case{R"({"hardware": {"snic_gbps": "fast"}})", "expected a number"},
           Case{R"({"hardware": {"snic_efficiency": 1.5}})", "snic_efficiency must be in (0, 1]"},
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

TEST(SimConfigTest, MissingFileIsNotFound) {
  auto r = LoadSimConfig("/nonexistent/sim.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace dualpath::sim
