#include "dualpath/sim/capacity.h"

#include <gtest/gtest.h>

#include <vector>

namespace dualpath::sim {
namespace {

TEST(CapacityTest, MeetsSloComparesBothMeansWithTheConfiguredLimits) {
  SloConfig slo;  // 4 s, 50 ms
  SimResult r;
  r.ttft_mean_s = 4.0;
  r.tpot_mean_s = 0.050;
  EXPECT_TRUE(MeetsSlo(r, slo));
  r.ttft_mean_s = 4.01;
  EXPECT_FALSE(MeetsSlo(r, slo));
  slo.ttft_mean_s = 5;
  EXPECT_TRUE(MeetsSlo(r, slo));
  r.tpot_mean_s = 0.051;
  EXPECT_FALSE(MeetsSlo(r, slo));
}

// A fake system whose TTFT grows with the rate: it meets a 4 s SLO up to 0.7 agents/s.
Result<SimResult> Fake(const RunSpec& spec, std::vector<RunSpec>* runs) {
  runs->push_back(spec);
  SimResult r;
  r.ttft_mean_s = spec.aps / 0.7 * 4.0;
  r.tpot_mean_s = 0.01;
  return r;
}

TEST(CapacityTest, FindMaxApsDoublesThenBisectsWithinThreePercent) {
  SimConfig config;
  config.online_horizon_s = 1000;
  RunSpec spec;
  spec.system = SystemKind::kDualPath;
  std::vector<RunSpec> runs;
  auto best = FindMaxAps(config, spec, [&](const RunSpec& s) { return Fake(s, &runs); });
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  EXPECT_LE(best->aps, 0.7);
  EXPECT_GE(best->aps, 0.7 / 1.03);
  EXPECT_TRUE(MeetsSlo(best->at, config.slo));
  ASSERT_GE(runs.size(), 5u);
  EXPECT_DOUBLE_EQ(runs[0].aps, 0.05);
  EXPECT_DOUBLE_EQ(runs[1].aps, 0.1);
  for (const RunSpec& r : runs) {
    EXPECT_TRUE(r.online);
    EXPECT_EQ(r.system, SystemKind::kDualPath);
    // Agents arrive over the horizon at every rate (at least 64).
    EXPECT_EQ(r.online_agents, std::max<uint64_t>(64, static_cast<uint64_t>(r.aps * 1000)));
  }
  // A stricter SLO (config.slo) lowers the rate found.
  config.slo.ttft_mean_s = 2.0;
  auto strict = FindMaxAps(config, spec, [&](const RunSpec& s) { return Fake(s, &runs); });
  ASSERT_TRUE(strict.ok());
  EXPECT_LE(strict->aps, 0.35);
  EXPECT_GE(strict->aps, 0.35 / 1.03);
}

TEST(CapacityTest, FindMaxApsIsZeroWhenTheFirstRateFails) {
  SimConfig config;
  config.slo.ttft_mean_s = 0.01;
  std::vector<RunSpec> runs;
  auto best = FindMaxAps(config, RunSpec{}, [&](const RunSpec& s) { return Fake(s, &runs); });
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->aps, 0);
  EXPECT_FALSE(MeetsSlo(best->at, config.slo));
}

TEST(CapacityTest, FindMaxApsPassesErrorsOn) {
  auto r = FindMaxAps(SimConfig{}, RunSpec{},
                      [](const RunSpec&) -> Result<SimResult> { return Internal("boom"); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "boom");
}

}  // namespace
}  // namespace dualpath::sim
