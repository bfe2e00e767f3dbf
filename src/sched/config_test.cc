#include "dualpath/sched/config.h"

#include <gtest/gtest.h>

#include <functional>

namespace dualpath::sched {
namespace {

TEST(ConfigTest, DefaultsArePaperDefaultsAndValid) {
  SchedConfig c;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.compute_quota, 300 * kNanosPerMilli);  // A.4
  EXPECT_EQ(c.read_side, ReadSidePolicy::kShorterQueue);
  EXPECT_EQ(c.engine_policy, EnginePolicy::kLoadAware);
  EXPECT_FALSE(c.split_reads);
  EXPECT_TRUE(c.layerwise_prefill);
}

TEST(ConfigTest, Presets) {
  EXPECT_EQ(SchedConfig::DualPath().read_side, ReadSidePolicy::kShorterQueue);
  EXPECT_EQ(SchedConfig::DualPathRoundRobinSide().read_side, ReadSidePolicy::kRoundRobin);
  EXPECT_TRUE(SchedConfig::DualPathRoundRobinSide().layerwise_prefill);
  EXPECT_EQ(SchedConfig::Basic().read_side, ReadSidePolicy::kPrefillOnly);
  EXPECT_FALSE(SchedConfig::Basic().layerwise_prefill);
  for (const SchedConfig& c :
       {SchedConfig::DualPath(), SchedConfig::DualPathRoundRobinSide(), SchedConfig::Basic()}) {
    EXPECT_TRUE(c.Validate().ok());
  }
  EXPECT_EQ(ReadSidePolicyName(ReadSidePolicy::kRoundRobin), "round-robin");
  EXPECT_EQ(EnginePolicyName(EnginePolicy::kLoadAware), "load-aware");
}

TEST(ConfigTest, EachBadFieldIsNamed) {
  struct Case {
    const char* field;
    std::function<void(SchedConfig&)> breakit;
  } cases[] = {
      {"short_read_queue_tokens", [](SchedConfig& c) { c.short_read_queue_tokens = -1; }},
      {"unfinished_token_limit", [](SchedConfig& c) { c.unfinished_token_limit = 0; }},
      {"engine_policy", [](SchedConfig& c) { c.engine_policy = static_cast<EnginePolicy>(9); }},
      {"read_side", [](SchedConfig& c) { c.read_side = static_cast<ReadSidePolicy>(9); }},
      {"split_reads",
       [](SchedConfig& c) {
         c.split_reads = true;
         c.read_side = ReadSidePolicy::kRoundRobin;
       }},
      {"block_tokens", [](SchedConfig& c) { c.block_tokens = 0; }},
      {"compute_quota", [](SchedConfig& c) { c.compute_quota = 0; }},
      {"min_chunk_tokens", [](SchedConfig& c) { c.min_chunk_tokens = -5; }},
  };
  for (const Case& k : cases) {
    SchedConfig c;
    k.breakit(c);
    Status s = c.Validate();
    EXPECT_EQ(s.code(), Code::kSchedBadConfig) << k.field;
    EXPECT_NE(s.message().find(k.field), std::string::npos) << s.ToString();
  }
  SchedConfig zero_alpha;
  zero_alpha.short_read_queue_tokens = 0;  // every non-empty queue is "long": allowed
  EXPECT_TRUE(zero_alpha.Validate().ok());
  SchedConfig split;
  split.split_reads = true;
  EXPECT_TRUE(split.Validate().ok());
}

TEST(ConfigTest, ThresholdsFromProfile) {
  auto t = ThresholdsFromProfile(1.25e6, 2e5, 0.5, 3.0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->short_read_queue_tokens, 625'000);
  EXPECT_EQ(t->unfinished_token_limit, 600'000);
  auto d = ThresholdsFromProfile(1e6, 1e5);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->short_read_queue_tokens, 1'000'000);  // 1 s default
  EXPECT_EQ(d->unfinished_token_limit, 200'000);     // 2 s default
  for (auto bad : {ThresholdsFromProfile(0, 1), ThresholdsFromProfile(1, -1),
                   ThresholdsFromProfile(1, 1, 0, 1), ThresholdsFromProfile(1, 1, 1, 1.0 / 0.0)}) {
    EXPECT_EQ(bad.status().code(), Code::kSchedBadConfig);
  }
  EXPECT_NE(ThresholdsFromProfile(0, 1).status().message().find("node_read_tokens_per_s"),
            std::string::npos);
}

}  // namespace
}  // namespace dualpath::sched
