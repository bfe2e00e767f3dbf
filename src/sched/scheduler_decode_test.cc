// DE scheduling (§6.1 phase 1 across groups, phase 2 within a group: HBM fit, high-token
// threshold, request count, tie-breaks) and the round-robin engine policy.
#include <gtest/gtest.h>

#include "dualpath/sched/scheduler.h"
#include "sched/scheduler_test_util.h"

namespace dualpath::sched {
namespace {

using testing::MakeScheduler;
using testing::Report;
using testing::Req;

constexpr GroupId kPeGroup{0};
constexpr GroupId kDe1{1};  // engines 3,4,5 on node 1
constexpr GroupId kDe2{2};  // engines 6,7,8 on node 2

ClusterDesc Cluster() {
  return MakeUniformCluster({.prefill_nodes = 1, .decode_nodes = 2, .gpus_per_node = 3}).value();
}

class DecodeTest : public ::testing::Test {
 protected:
  void SetUp() override { sched_ = MakeScheduler(Cluster(), SchedConfig::DualPath()); }
  std::vector<DecodeAssignment> Fetch(GroupId g, std::vector<EngineReport> reports) {
    FetchResult out;
    EXPECT_TRUE(sched_->FetchForGroup(g, reports, &out).ok());
    EXPECT_TRUE(out.prefill.empty());
    return out.decode;
  }
  static std::vector<EngineReport> Roomy(uint32_t first) {
    return {Report(first, 0, 0, 0, 1'000'000), Report(first + 1, 0, 0, 0, 1'000'000),
            Report(first + 2, 0, 0, 0, 1'000'000)};
  }
  std::unique_ptr<Scheduler> sched_;
};

TEST_F(DecodeTest, Phase1SendsEachRequestToTheGroupWithFewestTokens) {
  // Group 1 carries 900 tokens, group 2 carries 300.
  ASSERT_TRUE(sched_->ApplyReports({{Report(3, 1, 900, 0, 0), Report(6, 1, 300, 0, 0)}}).ok());
  ASSERT_TRUE(sched_->Submit(Req(1, 700, 0)).ok());
  // Group 1 fetches, but the request belongs to group 2: nothing for group 1.
  EXPECT_TRUE(Fetch(kDe1, {}).empty());
  EXPECT_EQ(sched_->global_queue_size(), 0);
  EXPECT_EQ(sched_->private_queue_size(kDe2), 1);
  EXPECT_EQ(sched_->private_queue_size(kDe1), 0);
  // Queued tokens count toward the group's load: 300 + 700 > 900, so the next goes to group 1.
  ASSERT_TRUE(sched_->Submit(Req(2, 700, 0)).ok());
  EXPECT_TRUE(Fetch(kDe1, {}).empty());  // no HBM reported yet: drained but not assigned
  EXPECT_EQ(sched_->private_queue_size(kDe1), 1);
  EXPECT_EQ(sched_->stats().de_fetch_no_hbm, 1);
  auto got = Fetch(kDe1, Roomy(3));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].request, RequestId(2));
  // Group 2's request waits for group 2's own fetch.
  auto got2 = Fetch(kDe2, Roomy(6));
  ASSERT_EQ(got2.size(), 1u);
  EXPECT_EQ(got2[0].request, RequestId(1));
}

TEST_F(DecodeTest, Phase1TiesGoToTheLowerGroupAndADrainAlternates) {
  for (uint64_t i = 1; i <= 4; ++i) ASSERT_TRUE(sched_->Submit(Req(i, 400, 0)).ok());
  auto got = Fetch(kDe1, Roomy(3));
  // Requests 1 and 3 to group 1 (tie -> lower id, then alternating as queued tokens grow).
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].request, RequestId(1));
  EXPECT_EQ(got[1].request, RequestId(3));
  EXPECT_EQ(sched_->private_queue_size(kDe2), 2);
}

TEST_F(DecodeTest, Phase2PrefersNonHighTokenDeWithFewestRequests) {
  // Threshold = (1000 + 0 + 0 + 300) / 3 = 433: engine 3 (1000 tokens) is high-token although it
  // has the fewest requests. Among the rest, engine 4 has fewer requests than engine 5.
  ASSERT_TRUE(sched_->Submit(Req(1, 300, 0)).ok());
  auto got = Fetch(kDe1, {Report(3, 1, 1000, 0, 5000), Report(4, 5, 0, 0, 5000),
                          Report(5, 6, 0, 0, 5000), Report(6, 0, 5000, 0, 0)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].decode, EngineId(4));
  EXPECT_EQ(sched_->stats().de_normal, 1);
  EXPECT_EQ(sched_->stats().de_high_token, 0);
  EngineReport v = sched_->View(EngineId(4));
  EXPECT_EQ(v.unfinished_requests, 6);
  EXPECT_EQ(v.unfinished_tokens, 300);
  EXPECT_EQ(v.hbm_free_tokens, 4700);
}

TEST_F(DecodeTest, Phase2RequestTieGoesToFewerTokensThenLowerId) {
  ASSERT_TRUE(sched_->Submit(Req(1, 100, 0)).ok());
  auto got = Fetch(kDe1, {Report(3, 2, 50, 0, 5000), Report(4, 2, 40, 0, 5000),
                          Report(5, 2, 40, 0, 5000), Report(6, 0, 5000, 0, 0)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].decode, EngineId(4));
}

TEST_F(DecodeTest, Phase2FallsBackToHighTokenDeWithFewestTokens) {
  // Engine 5 (the only non-high DE) lacks HBM; engines 3 and 4 are both high-token
  // (threshold (1000 + 900 + 0 + 300) / 3 = 733): the one with fewer tokens wins.
  ASSERT_TRUE(sched_->Submit(Req(1, 300, 0)).ok());
  auto got = Fetch(kDe1, {Report(3, 1, 1000, 0, 5000), Report(4, 9, 900, 0, 5000),
                          Report(5, 0, 0, 0, 299), Report(6, 0, 5000, 0, 0)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].decode, EngineId(4));
  EXPECT_EQ(sched_->stats().de_high_token, 1);
}

TEST_F(DecodeTest, Phase2ThresholdCountsOnlyRequestsThatFitInGroupHbm) {
  // Group HBM = 400 + 300 + 0 = 700: S = the first two requests (600 tokens), so the threshold
  // is (600 + 600) / 3 = 400 and engine 3 (600 tokens) is high-token. (Counting all four queued
  // requests would give 600 and make engine 3 a normal DE with fewer requests than engine 4.)
  ASSERT_TRUE(sched_->ApplyReports({{Report(6, 0, 100'000, 0, 0)}}).ok());  // keep group 2 away
  for (uint64_t i = 1; i <= 4; ++i) ASSERT_TRUE(sched_->Submit(Req(i, 300, 0)).ok());
  auto got =
      Fetch(kDe1, {Report(3, 0, 600, 0, 400), Report(4, 2, 0, 0, 300), Report(5, 0, 0, 0, 0)});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].decode, EngineId(4));  // the normal DE
  EXPECT_EQ(got[1].decode, EngineId(3));  // engine 4 is now full: high-token fallback
  // The third request fits nowhere: the fetch ends and it stays queued.
  EXPECT_EQ(sched_->private_queue_size(kDe1), 2);
  EXPECT_EQ(sched_->stats().de_fetch_no_hbm, 1);
  EXPECT_EQ(sched_->prefill_queue_size(), 2);
}

TEST_F(DecodeTest, Phase2PrefixAfterEarlierPlacementsCountsOnlyTheRequestsLeft) {
  // The private queue keeps running totals of its requests' needs (issue 27): after a fetch
  // placed the first two, S must be taken over the two left, not from the queue's start.
  ASSERT_TRUE(sched_->ApplyReports({{Report(6, 0, 100'000, 0, 0)}}).ok());  // keep group 2 away
  for (uint64_t i = 1; i <= 4; ++i) ASSERT_TRUE(sched_->Submit(Req(i, 300, 0)).ok());
  ASSERT_EQ(
      Fetch(kDe1, {Report(3, 0, 0, 0, 300), Report(4, 0, 0, 0, 300), Report(5, 0, 0, 0, 0)}).size(),
      2u);
  ASSERT_EQ(sched_->private_queue_size(kDe1), 2);
  // Group HBM = 300 + 300 + 0 = 600: S = both requests left (600 tokens), so the threshold is
  // (400 + 0 + 200 + 600) / 3 = 400 and engine 3 (400 tokens, no requests) is a normal DE that
  // beats engine 4 (5 requests). A prefix of one request (threshold 300) or none (200) would make
  // engine 3 high-token and send the first request to engine 4.
  auto got =
      Fetch(kDe1, {Report(3, 0, 400, 0, 300), Report(4, 5, 0, 0, 300), Report(5, 0, 200, 0, 0)});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].decode, EngineId(3));
  EXPECT_EQ(got[1].decode, EngineId(4));  // engine 3 is now full
  EXPECT_EQ(sched_->private_queue_size(kDe1), 0);
}

TEST_F(DecodeTest, HbmExactlyEqualToNeedFits) {
  // need = prompt + expected generation = 250 + 50.
  ASSERT_TRUE(sched_->Submit(Req(1, 250, 0, 50)).ok());
  auto none = Fetch(kDe1, {Report(3, 0, 0, 0, 299), Report(4, 0, 0, 0, 0), Report(5, 0, 0, 0, 0),
                           Report(6, 0, 9000, 0, 0)});
  EXPECT_TRUE(none.empty());
  auto got = Fetch(kDe1, {Report(5, 0, 0, 0, 300)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].decode, EngineId(5));
  EXPECT_EQ(sched_->View(EngineId(5)).hbm_free_tokens, 0);
}

TEST_F(DecodeTest, RoundRobinPolicyCyclesGroupsAndEngines) {
  SchedConfig c = SchedConfig::DualPath();
  c.engine_policy = EnginePolicy::kRoundRobin;
  sched_ = MakeScheduler(Cluster(), c);
  // Group 1 is much heavier, but round-robin ignores load: requests alternate groups.
  ASSERT_TRUE(sched_->ApplyReports({{Report(3, 9, 90'000, 0, 0)}}).ok());
  for (uint64_t i = 1; i <= 6; ++i) ASSERT_TRUE(sched_->Submit(Req(i, 100, 0)).ok());
  // Engine 4 lacks HBM: skipped.
  auto got = Fetch(
      kDe1, {Report(3, 9, 90'000, 0, 1000), Report(4, 0, 0, 0, 10), Report(5, 0, 0, 0, 1000)});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].request, RequestId(1));
  EXPECT_EQ(got[0].decode, EngineId(3));
  EXPECT_EQ(got[1].request, RequestId(3));
  EXPECT_EQ(got[1].decode, EngineId(5));
  EXPECT_EQ(got[2].request, RequestId(5));
  EXPECT_EQ(got[2].decode, EngineId(3));
  EXPECT_EQ(sched_->private_queue_size(kDe2), 3);
}

TEST_F(DecodeTest, EndToEndAssignmentCarriesTheChosenDecodeEngine) {
  ASSERT_TRUE(sched_->Submit(Req(42, 1000, 990, 20)).ok());
  auto de = Fetch(kDe1, Roomy(3));
  ASSERT_EQ(de.size(), 1u);
  FetchResult out;
  ASSERT_TRUE(sched_->FetchForGroup(kPeGroup, {}, &out).ok());
  ASSERT_EQ(out.prefill.size(), 1u);
  EXPECT_EQ(out.prefill[0].request, RequestId(42));
  EXPECT_EQ(out.prefill[0].decode, de[0].decode);
  EXPECT_EQ(out.prefill[0].prefill_read_tokens + out.prefill[0].decode_read_tokens, 990);
  EXPECT_EQ(sched_->pending(), 0);
  EXPECT_EQ(sched_->stats().decode_assigned, 1);
  EXPECT_EQ(sched_->stats().prefill_assigned, 1);
}

}  // namespace
}  // namespace dualpath::sched
