// Routing (routing.h): the names, the fixed-engine mapping, and the scheduler honouring a fixed
// prefill engine (SchedRequest::prefill_engine) where its own §6.1 choice would differ.
#include "dualpath/sched/routing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dualpath/sched/scheduler.h"
#include "sched/scheduler_test_util.h"

namespace dualpath::sched {
namespace {

using testing::MakeScheduler;
using testing::Report;
using testing::Req;

TEST(RoutingTest, NamesRoundTripAndUnknownIsRefused) {
  for (Routing r : {Routing::kDualPath, Routing::kRoundRobin, Routing::kSticky}) {
    Result<Routing> parsed = ParseRouting(RoutingName(r));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, r);
  }
  Result<Routing> bad = ParseRouting("rr");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'rr'"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("round-robin"), std::string::npos);
}

TEST(RoutingTest, RoundRobinAlternatesAnAgentsTurnsStickyKeepsThem) {
  // 2 prefill engines: agent 3's turns 0..3 go 1,0,1,0 under round-robin, 1,1,1,1 sticky.
  std::vector<uint32_t> rr, sticky;
  for (uint64_t k = 0; k < 4; ++k) {
    rr.push_back(RoutedPrefillIndex(Routing::kRoundRobin, 3, k, 2).value());
    sticky.push_back(RoutedPrefillIndex(Routing::kSticky, 3, k, 2).value());
  }
  EXPECT_EQ(rr, (std::vector<uint32_t>{1, 0, 1, 0}));
  EXPECT_EQ(sticky, (std::vector<uint32_t>{1, 1, 1, 1}));
  // Agents start on different engines: agent a's turn 0 is engine a mod P under both.
  EXPECT_EQ(RoutedPrefillIndex(Routing::kRoundRobin, 4, 0, 3).value(), 1u);
  EXPECT_EQ(RoutedPrefillIndex(Routing::kSticky, 4, 7, 3).value(), 1u);
  EXPECT_EQ(RoutedPrefillIndex(Routing::kRoundRobin, 4, 7, 3).value(), 2u);  // (4 + 7) mod 3
  // No overflow at the top of the range: (2^64 - 1) mod 3 = 0, + 2 = 2.
  EXPECT_EQ(RoutedPrefillIndex(Routing::kRoundRobin, UINT64_MAX, 2, 3).value(), 2u);
  EXPECT_FALSE(RoutedPrefillIndex(Routing::kDualPath, 3, 1, 2).has_value());
  EXPECT_FALSE(RoutedPrefillIndex(Routing::kSticky, 3, 1, 0).has_value());
}

// Two prefill nodes of one engine each, every engine its own group (the service's layout), and one
// decode engine: engine 0 = group 0, engine 1 = group 1, engine 2 = the DE (group 2).
class FixedEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = MakeUniformCluster({.prefill_nodes = 2, .decode_nodes = 1, .gpus_per_node = 1});
    ASSERT_TRUE(c.ok());
    SchedConfig config = SchedConfig::DualPath();
    config.short_read_queue_tokens = 1000;
    config.unfinished_token_limit = 10'000;
    sched_ = MakeScheduler(*c, config);
    // The DE has room for everything (the decode pass must not hold requests back).
    ASSERT_TRUE(sched_->ApplyReports({{Report(2, 0, 0, 0, 1'000'000)}}).ok());
  }
  SchedRequest Pinned(uint64_t id, int64_t prompt, uint32_t engine) {
    SchedRequest r = Req(id, prompt, 0, 1);
    r.prefill_engine = EngineId(engine);
    return r;
  }
  // Decode pass (requests reach the prefill queue), then the prefill fetch of `group`.
  std::vector<Assignment> Fetch(uint32_t group, std::vector<EngineReport> reports = {}) {
    FetchResult out;
    EXPECT_TRUE(sched_->FetchForGroup(GroupId(2), {}, &out).ok());
    out.Clear();
    EXPECT_TRUE(sched_->FetchForGroup(GroupId(group), reports, &out).ok());
    return out.prefill;
  }
  std::unique_ptr<Scheduler> sched_;
};

TEST_F(FixedEngineTest, AgentsTurnsFollowTheRouting) {
  // Each "turn" is submitted after the previous one's assignment, as a closed-loop agent does; both
  // PEs fetch after every submission, engine 0 first (its §6.1 choice would take everything: it
  // fetches first and is never overloaded here).
  for (Routing routing : {Routing::kRoundRobin, Routing::kSticky, Routing::kDualPath}) {
    std::vector<uint32_t> engines;
    for (uint64_t turn = 0; turn < 4; ++turn) {
      SchedRequest r = Req(100 * static_cast<uint64_t>(routing) + turn, 100, 0, 1);
      r.session = SessionId(5);
      if (auto idx = RoutedPrefillIndex(routing, 5, turn, 2)) r.prefill_engine = EngineId(*idx);
      ASSERT_TRUE(sched_->Submit(r).ok());
      std::vector<Assignment> got = Fetch(0);
      std::vector<Assignment> got1 = Fetch(1);
      got.insert(got.end(), got1.begin(), got1.end());
      ASSERT_EQ(got.size(), 1u) << RoutingName(routing) << " turn " << turn;
      engines.push_back(got[0].prefill.value());
      // The engine finished it: its view goes back to idle.
      ASSERT_TRUE(sched_->ApplyReports({{Report(got[0].prefill.value(), 0, 0, 0)}}).ok());
    }
    switch (routing) {
      case Routing::kRoundRobin:
        EXPECT_EQ(engines, (std::vector<uint32_t>{1, 0, 1, 0}));
        break;
      case Routing::kSticky:
        EXPECT_EQ(engines, (std::vector<uint32_t>{1, 1, 1, 1}));
        break;
      case Routing::kDualPath:  // the first fetcher takes every turn
        EXPECT_EQ(engines, (std::vector<uint32_t>{0, 0, 0, 0}));
        break;
    }
  }
}

TEST_F(FixedEngineTest, AnotherGroupSkipsAFixedRequestAndTakesTheOnesBehindIt) {
  ASSERT_TRUE(sched_->Submit(Pinned(1, 100, 1)).ok());
  ASSERT_TRUE(sched_->Submit(Req(2, 100, 0, 1)).ok());
  ASSERT_TRUE(sched_->Submit(Pinned(3, 100, 0)).ok());
  std::vector<Assignment> a0 = Fetch(0);
  ASSERT_EQ(a0.size(), 2u);
  EXPECT_EQ(a0[0].request, RequestId(2));
  EXPECT_EQ(a0[1].request, RequestId(3));
  EXPECT_EQ(a0[0].prefill, EngineId(0));
  EXPECT_EQ(a0[1].prefill, EngineId(0));
  EXPECT_EQ(sched_->prefill_queue_size(), 1);  // request 1 waits for engine 1
  std::vector<Assignment> a1 = Fetch(1);
  ASSERT_EQ(a1.size(), 1u);
  EXPECT_EQ(a1[0].request, RequestId(1));
  EXPECT_EQ(a1[0].prefill, EngineId(1));
  EXPECT_EQ(sched_->pending(), 0);
}

TEST_F(FixedEngineTest, AFixedEngineIsUsedEvenWhenBusierButNeverWhenOverloaded) {
  // Engine 1 busier than engine 0 but under β: the fixed request still goes to it.
  ASSERT_TRUE(sched_->Submit(Pinned(1, 100, 1)).ok());
  std::vector<Assignment> a = Fetch(1, {Report(1, 3, 5000, 0)});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].prefill, EngineId(1));
  // Overloaded (tokens > β): the request waits, also when engine 0 is idle and fetches.
  ASSERT_TRUE(sched_->Submit(Pinned(2, 100, 1)).ok());
  EXPECT_TRUE(Fetch(1, {Report(1, 4, 20'000, 0)}).empty());
  EXPECT_EQ(sched_->stats().pe_fetch_all_overloaded, 1);
  EXPECT_TRUE(Fetch(0, {Report(0, 0, 0, 0)}).empty());
  EXPECT_EQ(sched_->prefill_queue_size(), 1);
  // Back under β: it goes.
  a = Fetch(1, {Report(1, 1, 100, 0)});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].request, RequestId(2));
  EXPECT_EQ(a[0].prefill, EngineId(1));
}

TEST_F(FixedEngineTest, InsideAGroupTheFixedEngineWinsOverTheLoadAwareChoice) {
  // One prefill group of two engines (0, 1 on node 0) and a decode node (engine 2).
  auto c = MakeUniformCluster({.prefill_nodes = 1, .decode_nodes = 1, .gpus_per_node = 2});
  ASSERT_TRUE(c.ok());
  sched_ = MakeScheduler(*c, SchedConfig::DualPath());
  ASSERT_TRUE(sched_->ApplyReports({{Report(2, 0, 0, 0, 1'000'000)}}).ok());
  ASSERT_TRUE(sched_->Submit(Pinned(1, 100, 1)).ok());
  ASSERT_TRUE(sched_->Submit(Req(2, 100, 0, 1)).ok());
  FetchResult out;
  ASSERT_TRUE(sched_->FetchForGroup(GroupId(1), {}, &out).ok());
  out.Clear();
  // Engine 1 carries more tokens: the unfixed request goes to engine 0, the fixed one to 1.
  ASSERT_TRUE(
      sched_->FetchForGroup(GroupId(0), {{Report(0, 0, 0, 0), Report(1, 2, 900, 0)}}, &out).ok());
  ASSERT_EQ(out.prefill.size(), 2u);
  EXPECT_EQ(out.prefill[0].request, RequestId(1));
  EXPECT_EQ(out.prefill[0].prefill, EngineId(1));
  EXPECT_EQ(out.prefill[1].request, RequestId(2));
  EXPECT_EQ(out.prefill[1].prefill, EngineId(0));
}

TEST_F(FixedEngineTest, SubmitRefusesAFixedEngineThatIsNoPrefillEngine) {
  Status decode = sched_->Submit(Pinned(1, 100, 2));  // engine 2 decodes
  EXPECT_EQ(decode.code(), Code::kInvalidArgument);
  EXPECT_NE(decode.message().find("prefill_engine 2"), std::string::npos) << decode.ToString();
  EXPECT_EQ(sched_->Submit(Pinned(2, 100, 7)).code(), Code::kInvalidArgument);
  EXPECT_EQ(sched_->stats().submitted, 0);
}

}  // namespace
}  // namespace dualpath::sched
