#include "dualpath/sched/system.h"

#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <vector>

#include "dualpath/sched/scheduler.h"
#include "sched/scheduler_test_util.h"

namespace dualpath::sched {
namespace {

TEST(SystemTest, NamesRoundTrip) {
  for (SystemKind k : kAllSystemKinds) {
    Result<SystemKind> r = ParseSystem(SystemName(k));
    ASSERT_TRUE(r.ok()) << SystemName(k);
    EXPECT_EQ(*r, k);
  }
  EXPECT_EQ(SystemName(SystemKind::kDualPathRr), "dualpath-rr");
  EXPECT_EQ(SystemName(SystemKind::kDualPathSplit), "dualpath-split");
}

TEST(SystemTest, ParseNamesTheAcceptedKinds) {
  Result<SystemKind> bad = ParseSystem("Basic", kServiceSystems);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "unknown system 'Basic' (expected basic, dualpath or oracle)");
  // A kind outside the accepted set is unknown there.
  EXPECT_FALSE(ParseSystem("layerwise", kServiceSystems).ok());
  EXPECT_TRUE(ParseSystem("layerwise").ok());
  EXPECT_FALSE(ParseSystem("all").ok());  // a list word, not a kind
}

TEST(SystemTest, ListsExpandAllKeepOrderAndDropRepeats) {
  using V = std::vector<SystemKind>;
  EXPECT_EQ(*ParseSystemList("all"), V(std::begin(kComparedSystems), std::end(kComparedSystems)));
  EXPECT_EQ(*ParseSystemList("oracle,basic"), (V{SystemKind::kOracle, SystemKind::kBasic}));
  EXPECT_EQ(*ParseSystemList("dualpath,all,basic", kServiceSystems),
            (V{SystemKind::kDualPath, SystemKind::kBasic, SystemKind::kOracle}));
  EXPECT_EQ(*ParseSystemList("basic,"), V{SystemKind::kBasic});  // as getline splits it
  for (const char* bad : {"", ",basic", "basic,,oracle", "fast", "basic,layerwise"}) {
    Result<std::vector<SystemKind>> r = ParseSystemList(bad, kServiceSystems);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("expected basic, dualpath, oracle or all"),
              std::string::npos)
        << r.status().message();
  }
  EXPECT_NE(ParseSystemList("fast").status().message().find("unknown system 'fast'"),
            std::string::npos);
}

TEST(SystemTest, PresetsAreThePapersConfigs) {
  EXPECT_EQ(PresetFor(SystemKind::kBasic).read_side, ReadSidePolicy::kPrefillOnly);
  EXPECT_FALSE(PresetFor(SystemKind::kBasic).layerwise_prefill);
  EXPECT_EQ(PresetFor(SystemKind::kLayerwise).read_side, ReadSidePolicy::kPrefillOnly);
  EXPECT_TRUE(PresetFor(SystemKind::kLayerwise).layerwise_prefill);
  EXPECT_EQ(PresetFor(SystemKind::kDualPathRr).read_side, ReadSidePolicy::kRoundRobin);
  EXPECT_EQ(PresetFor(SystemKind::kDualPath).read_side, ReadSidePolicy::kShorterQueue);
  EXPECT_FALSE(PresetFor(SystemKind::kDualPath).split_reads);
  EXPECT_EQ(PresetFor(SystemKind::kOracle).read_side, ReadSidePolicy::kShorterQueue);
  EXPECT_TRUE(PresetFor(SystemKind::kDualPathSplit).split_reads);
  for (SystemKind k : kAllSystemKinds) {
    EXPECT_TRUE(PresetFor(k).Validate().ok()) << SystemName(k);
    EXPECT_EQ(PresetFor(k).layerwise_prefill, k != SystemKind::kBasic) << SystemName(k);
  }
}

TEST(SystemTest, OracleRule) {
  for (SystemKind k : kAllSystemKinds) {
    const bool oracle = k == SystemKind::kOracle;
    EXPECT_EQ(SchedHitTokens(k, 4096), oracle ? 0 : 4096) << SystemName(k);
    EXPECT_EQ(MovesKv(k), !oracle) << SystemName(k);
  }
}

// The service's layout (one engine per group and per node): whether the scheduler sees an Oracle
// request's real hit or 0 changes only the read side and the read-queue view, never which PE and
// DE are chosen, because a group of one engine has no PE to rank by read-queue category. So the
// Oracle rule (hit 0) leaves a cluster run's engine choices as they were when the service
// submitted the real hit and dropped the side afterwards.
TEST(SystemTest, OracleHitDoesNotChangeEngineChoiceWithOneEnginePerGroup) {
  const ClusterDesc cluster =
      MakeUniformCluster({.prefill_nodes = 3, .decode_nodes = 2, .gpus_per_node = 1}).value();
  SchedConfig config = PresetFor(SystemKind::kOracle);
  config.short_read_queue_tokens = 20'000;  // small: many PEs would change category
  config.unfinished_token_limit = 60'000;
  auto real = testing::MakeScheduler(cluster, config);
  auto zero = testing::MakeScheduler(cluster, config);
  using Choice = std::tuple<uint64_t, uint32_t, uint32_t>;
  std::vector<Choice> real_choices, zero_choices;
  std::mt19937_64 rng(7);
  uint64_t next_id = 0;
  FetchResult out;
  for (int round = 0; round < 400; ++round) {
    for (int i = static_cast<int>(rng() % 4); i > 0; --i) {
      const int64_t hit = static_cast<int64_t>(rng() % 30'000);
      const int64_t prompt = hit + 1 + static_cast<int64_t>(rng() % 3000);
      const int64_t gen = static_cast<int64_t>(rng() % 300);
      ASSERT_TRUE(real->Submit(testing::Req(next_id, prompt, hit, gen)).ok());
      ASSERT_TRUE(
          zero->Submit(testing::Req(next_id, prompt, SchedHitTokens(SystemKind::kOracle, hit), gen))
              .ok());
      ++next_id;
    }
    const uint32_t g = static_cast<uint32_t>(rng() % static_cast<uint64_t>(cluster.num_groups()));
    // The engine reports a random load and an empty read queue (an Oracle engine reads nothing).
    const EngineReport rep =
        testing::Report(g, static_cast<int64_t>(rng() % 4), static_cast<int64_t>(rng() % 80'000), 0,
                        static_cast<int64_t>(rng() % 100'000));
    for (auto* s : {real.get(), zero.get()}) {
      out.Clear();
      ASSERT_TRUE(s->FetchForGroup(GroupId(g), {&rep, 1}, &out).ok());
      auto& log = s == real.get() ? real_choices : zero_choices;
      for (const DecodeAssignment& d : out.decode) {
        log.emplace_back(d.request.value(), 0, d.decode.value());
      }
      for (const Assignment& a : out.prefill) {
        log.emplace_back(a.request.value(), a.prefill.value(), a.decode.value());
      }
    }
  }
  EXPECT_GT(real->stats().prefill_assigned, 100);
  EXPECT_GT(real->stats().read_tokens_prefill + real->stats().read_tokens_decode, 0);
  EXPECT_EQ(zero->stats().read_tokens_prefill + zero->stats().read_tokens_decode, 0);
  EXPECT_EQ(real_choices, zero_choices);
}

}  // namespace
}  // namespace dualpath::sched
