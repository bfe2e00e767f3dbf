#include "dualpath/sim/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dualpath::sim {
namespace {

using nlohmann::json;

TEST(ReportTest, ConfigObjectHasOneKeyPerRunInfoField) {
  Report report;
  report.run.model = "ds660b";
  report.run.shape = {2, 4};
  report.run.agents = 12;
  report.run.requests = 340;
  report.run.workload = "synthetic-16K";
  report.run.trajectories = 500;
  report.run.max_len_k = 16;
  report.run.mode = RunMode::kOnline;
  report.run.aps = 0.5;
  report.run.seed = 9;
  report.run.routing = "round-robin";
  report.run.sim.snic_window_s = 2;
  const json j = json::parse(ReportJson(report));
  const json& c = j.at("config");
  EXPECT_EQ(c.size(), 14u) << c.dump();
  EXPECT_EQ(c.at("model"), "ds660b");
  EXPECT_EQ(c.at("pd"), "2P4D");
  EXPECT_EQ(c.at("agents"), 12);
  EXPECT_EQ(c.at("requests"), 340);
  EXPECT_EQ(c.at("workload"), "synthetic-16K");
  EXPECT_EQ(c.at("trajectories"), 500);
  EXPECT_EQ(c.at("max_len_k"), 16);
  EXPECT_EQ(c.at("mode"), "online");
  EXPECT_EQ(c.at("aps"), 0.5);
  EXPECT_EQ(c.at("ablation"), false);
  EXPECT_EQ(c.at("seed"), 9);
  EXPECT_EQ(c.at("routing"), "round-robin");
  EXPECT_TRUE(c.at("trace").is_null());
  // The effective sim config, itself a valid --config file.
  EXPECT_EQ(c.at("sim").at("snic_window_s"), 2.0);
  EXPECT_TRUE(ParseSimConfig(c.at("sim").dump(), "config.sim").ok());
}

TEST(ReportTest, OptionalFieldsAreNull) {
  Report report;
  report.run.mode = RunMode::kFindMaxAps;
  report.run.trace = "t.jsonl";
  const json c = json::parse(ReportJson(report)).at("config");
  EXPECT_TRUE(c.at("trajectories").is_null());
  EXPECT_TRUE(c.at("aps").is_null());
  EXPECT_EQ(c.at("trace"), "t.jsonl");
  EXPECT_EQ(c.at("mode"), "find-max-aps");
  EXPECT_EQ(RunModeName(RunMode::kOffline), "offline");
}

}  // namespace
}  // namespace dualpath::sim
