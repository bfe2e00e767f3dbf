// PE scheduling (§6.1 categories, minimum tokens, tie-breaks, thresholds at their boundaries),
// read-side choice inside the scheduler, and the scheduler's input validation.
#include <gtest/gtest.h>

#include "dualpath/sched/scheduler.h"
#include "sched/scheduler_test_util.h"

namespace dualpath::sched {
namespace {

using testing::MakeScheduler;
using testing::Report;
using testing::Req;

constexpr int64_t kAlpha = 1000;   // short read queue threshold
constexpr int64_t kBeta = 10'000;  // unfinished token limit
constexpr GroupId kPeGroup{0};
constexpr GroupId kDeGroup{1};

// One prefill group of two nodes (engines 0,1 on node 0; 2,3 on node 1) and one decode node
// (engines 4,5 on node 2).
ClusterDesc Cluster() {
  auto c = MakeUniformCluster(
      {.prefill_nodes = 2, .decode_nodes = 1, .gpus_per_node = 2, .nodes_per_prefill_group = 2});
  return c.value();
}

SchedConfig Config(SchedConfig c = SchedConfig::DualPath()) {
  c.short_read_queue_tokens = kAlpha;
  c.unfinished_token_limit = kBeta;
  return c;
}

class PrefillTest : public ::testing::Test {
 protected:
  void SetUp() override { Reset(Config()); }
  void Reset(const SchedConfig& config) {
    sched_ = MakeScheduler(Cluster(), config);
    // DEs with plenty of HBM and an empty node queue, unless a test says otherwise.
    de_reports_ = {Report(4, 0, 0, 0, 1'000'000), Report(5, 0, 0, 0, 1'000'000)};
  }
  // Submits, runs the decode fetch (so requests reach the prefill queue), then the prefill fetch
  // with `pe_reports`.
  FetchResult Run(std::vector<SchedRequest> reqs, std::vector<EngineReport> pe_reports) {
    for (const SchedRequest& r : reqs) EXPECT_TRUE(sched_->Submit(r).ok());
    FetchResult out;
    EXPECT_TRUE(sched_->FetchForGroup(kDeGroup, de_reports_, &out).ok());
    EXPECT_EQ(out.decode.size(), reqs.size());
    out.Clear();
    EXPECT_TRUE(sched_->FetchForGroup(kPeGroup, pe_reports, &out).ok());
    return out;
  }
  std::unique_ptr<Scheduler> sched_;
  std::vector<EngineReport> de_reports_;
};

TEST_F(PrefillTest, ShortQueueCategoryBeatsLongQueueEvenWithMoreTokens) {
  // Node 0 long queue, node 1 short; node 1's engines carry more tokens.
  auto out = Run({Req(1, 100, 0)}, {Report(0, 0, 0, 2000), Report(1, 0, 0, 2000),
                                    Report(2, 3, 5000, 500), Report(3, 2, 4000, 500)});
  ASSERT_EQ(out.prefill.size(), 1u);
  EXPECT_EQ(out.prefill[0].prefill, EngineId(3));  // category 2, minimum tokens
  EXPECT_EQ(sched_->stats().pe_short_queue, 1);
  EXPECT_EQ(sched_->stats().pe_long_queue, 0);
}

TEST_F(PrefillTest, FallsBackToLongQueueCategoryWithMinimumTokens) {
  auto out = Run({Req(1, 100, 0)}, {Report(0, 0, 300, 2000), Report(1, 0, 200, 2000),
                                    Report(2, 0, 100, 3000), Report(3, 0, 400, 3000)});
  ASSERT_EQ(out.prefill.size(), 1u);
  EXPECT_EQ(out.prefill[0].prefill, EngineId(2));
  EXPECT_EQ(sched_->stats().pe_long_queue, 1);
}

TEST_F(PrefillTest, ReadQueueExactlyAtThresholdIsShort) {
  // Node 0 at α (short): its engine with more tokens still beats node 1 (α + 1, long).
  auto out = Run({Req(1, 100, 0)}, {Report(0, 0, 900, kAlpha), Report(1, 0, 900, kAlpha),
                                    Report(2, 0, 0, kAlpha + 1), Report(3, 0, 0, kAlpha + 1)});
  ASSERT_EQ(out.prefill.size(), 1u);
  EXPECT_EQ(out.prefill[0].prefill, EngineId(0));
}

TEST_F(PrefillTest, UnfinishedTokensExactlyAtLimitIsNotOverloaded) {
  // Engine 0 at β is eligible; everything else is over β (overloaded) despite shorter queues.
  auto out = Run({Req(1, 100, 0), Req(2, 100, 0)},
                 {Report(0, 0, kBeta, 0), Report(1, 0, kBeta + 1, 0), Report(2, 0, kBeta + 1, 0),
                  Report(3, 0, kBeta + 1, 0)});
  // The first request goes to engine 0; that pushes it over β, so the fetch ends.
  ASSERT_EQ(out.prefill.size(), 1u);
  EXPECT_EQ(out.prefill[0].prefill, EngineId(0));
  EXPECT_EQ(sched_->View(EngineId(0)).unfinished_tokens, kBeta + 100);
  EXPECT_EQ(sched_->stats().pe_fetch_all_overloaded, 1);
  EXPECT_EQ(sched_->prefill_queue_size(), 1);
  EXPECT_EQ(sched_->pending(), 1);
}

TEST_F(PrefillTest, AllOverloadedAssignsNothingAndKeepsTheQueue) {
  auto out = Run({Req(1, 100, 0)}, {Report(0, 9, kBeta + 1, 0), Report(1, 9, kBeta + 5, 0),
                                    Report(2, 9, kBeta * 2, 0), Report(3, 9, kBeta + 1, 0)});
  EXPECT_TRUE(out.prefill.empty());
  EXPECT_EQ(sched_->prefill_queue_size(), 1);
  // Once an engine reports it drained, the same request is assigned there.
  FetchResult again;
  ASSERT_TRUE(sched_->FetchForGroup(kPeGroup, {{Report(3, 0, 0, 0)}}, &again).ok());
  ASSERT_EQ(again.prefill.size(), 1u);
  EXPECT_EQ(again.prefill[0].request, RequestId(1));
  EXPECT_EQ(again.prefill[0].prefill, EngineId(3));
}

TEST_F(PrefillTest, TieOnTokensGoesToFewerRequestsThenLowerId) {
  auto out = Run({Req(1, 100, 0)}, {Report(0, 5, 700, 0), Report(1, 4, 700, 0),
                                    Report(2, 4, 700, 0), Report(3, 4, 800, 0)});
  ASSERT_EQ(out.prefill.size(), 1u);
  EXPECT_EQ(out.prefill[0].prefill, EngineId(1));  // 1 and 2 tie on tokens and requests
}

TEST_F(PrefillTest, AssignmentUpdatesTokensSoAFetchSpreadsRequestsInFifoOrder) {
  std::vector<SchedRequest> reqs;
  for (uint64_t i = 1; i <= 5; ++i) reqs.push_back(Req(i, 100, 0));
  auto out =
      Run(reqs, {Report(0, 0, 0, 0), Report(1, 0, 0, 0), Report(2, 0, 0, 0), Report(3, 0, 0, 0)});
  ASSERT_EQ(out.prefill.size(), 5u);
  const uint32_t want[] = {0, 1, 2, 3, 0};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out.prefill[i].request, RequestId(i + 1));  // FIFO
    EXPECT_EQ(out.prefill[i].prefill, EngineId(want[i]));
  }
  EXPECT_EQ(sched_->View(EngineId(0)).unfinished_requests, 2);
  EXPECT_EQ(sched_->View(EngineId(0)).unfinished_tokens, 200);
}

TEST_F(PrefillTest, ReadsMoveANodeIntoTheLongQueueCategoryWithinOneFetch) {
  Reset(Config(SchedConfig::Basic()));  // reads always on the PE's node
  // Node 0 short (900); node 1 short (0) but its engines carry more tokens.
  auto out = Run({Req(1, 200, 200), Req(2, 200, 200)}, {Report(0, 0, 0, 900), Report(1, 0, 0, 900),
                                                        Report(2, 0, 50, 0), Report(3, 0, 50, 0)});
  ASSERT_EQ(out.prefill.size(), 2u);
  EXPECT_EQ(out.prefill[0].prefill, EngineId(0));
  EXPECT_EQ(sched_->NodeReadQueue(NodeId(0)), 1100);  // > α now: engine 1 became category 3
  EXPECT_EQ(out.prefill[1].prefill, EngineId(2));
  EXPECT_EQ(sched_->NodeReadQueue(NodeId(1)), 200);
}

TEST_F(PrefillTest, RoundRobinEnginePolicyCyclesAndSkipsOverloaded) {
  SchedConfig c = Config();
  c.engine_policy = EnginePolicy::kRoundRobin;
  Reset(c);
  std::vector<SchedRequest> reqs;
  for (uint64_t i = 1; i <= 4; ++i) reqs.push_back(Req(i, 100, 0));
  // Engine 2 is overloaded; engine 3 has the most tokens but round-robin ignores load.
  auto out = Run(reqs, {Report(0, 0, 0, 0), Report(1, 0, 0, 0), Report(2, 0, kBeta + 1, 0),
                        Report(3, 0, 9000, 0)});
  ASSERT_EQ(out.prefill.size(), 4u);
  const uint32_t want[] = {0, 1, 3, 0};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out.prefill[i].prefill, EngineId(want[i])) << i;
}

TEST_F(PrefillTest, DualPathReadsOnTheDecodeSideWhenItsQueueIsShorter) {
  de_reports_ = {Report(4, 0, 0, 100, 1'000'000), Report(5, 0, 0, 100, 1'000'000)};
  auto out = Run({Req(1, 1000, 900, 10)}, {Report(0, 0, 0, 500), Report(1, 0, 0, 500),
                                           Report(2, 0, 0, 500), Report(3, 0, 0, 500)});
  ASSERT_EQ(out.prefill.size(), 1u);
  const Assignment& a = out.prefill[0];
  EXPECT_EQ(a.side, ReadSide::kDecode);
  EXPECT_EQ(a.decode_read_tokens, 900);
  EXPECT_EQ(a.prefill_read_tokens, 0);
  EXPECT_EQ(a.decode, EngineId(4));
  EXPECT_EQ(a.prompt_tokens, 1000);
  EXPECT_EQ(a.hit_tokens, 900);
  EXPECT_EQ(a.expected_gen_tokens, 10);
  EXPECT_EQ(sched_->NodeReadQueue(NodeId(2)), 100 + 900);  // DE node's queue grew
  EXPECT_EQ(sched_->stats().read_decode, 1);
  EXPECT_EQ(sched_->stats().read_tokens_decode, 900);
}

TEST_F(PrefillTest, NodeReadQueueUpdateSteersTheReadSide) {
  // The DE node's queue was long when its group fetched; telemetry says it drained since.
  de_reports_ = {Report(4, 0, 0, 9000, 1'000'000), Report(5, 0, 0, 9000, 1'000'000)};
  ASSERT_TRUE(sched_->Submit(Req(1, 1000, 900)).ok());
  ASSERT_TRUE(sched_->Submit(Req(2, 1000, 900)).ok());
  FetchResult out;
  ASSERT_TRUE(sched_->FetchForGroup(kDeGroup, de_reports_, &out).ok());
  out.Clear();
  std::vector<EngineReport> pe = {Report(0, 0, 0, 500), Report(1, 0, 0, 500), Report(2, 0, 0, 500),
                                  Report(3, 0, 0, 500)};
  ASSERT_TRUE(sched_->ApplyReports(pe).ok());
  ASSERT_TRUE(sched_->ApplyNodeReadQueue(NodeId(2), 100).ok());
  ASSERT_TRUE(sched_->FetchForGroup(kPeGroup, {}, &out).ok());
  ASSERT_EQ(out.prefill.size(), 2u);
  EXPECT_EQ(out.prefill[0].side, ReadSide::kDecode);   // 100 < 500
  EXPECT_EQ(out.prefill[1].side, ReadSide::kPrefill);  // DE node now at 1000 > 500
  EXPECT_EQ(sched_->ApplyNodeReadQueue(NodeId(9), 0).code(), Code::kInvalidArgument);
  EXPECT_EQ(sched_->ApplyNodeReadQueue(NodeId(0), -1).code(), Code::kInvalidArgument);
}

TEST_F(PrefillTest, BasicNeverReadsOnTheDecodeSide) {
  Reset(Config(SchedConfig::Basic()));
  auto out = Run(
      {Req(1, 1000, 900), Req(2, 1000, 900)},
      {Report(0, 0, 0, 5000), Report(1, 0, 0, 5000), Report(2, 0, 0, 5000), Report(3, 0, 0, 5000)});
  ASSERT_EQ(out.prefill.size(), 2u);
  for (const Assignment& a : out.prefill) {
    EXPECT_EQ(a.side, ReadSide::kPrefill);
    EXPECT_EQ(a.prefill_read_tokens, 900);
  }
  EXPECT_EQ(sched_->stats().read_decode, 0);
}

TEST_F(PrefillTest, SplitReadsInsideTheScheduler) {
  SchedConfig c = Config();
  c.split_reads = true;
  Reset(c);
  de_reports_ = {Report(4, 0, 0, 4000, 1'000'000), Report(5, 0, 0, 4000, 1'000'000)};
  auto out = Run({Req(1, 3200, 3000)}, {Report(0, 0, 0, 5000), Report(1, 0, 0, 5000),
                                        Report(2, 0, 0, 5000), Report(3, 0, 0, 5000)});
  ASSERT_EQ(out.prefill.size(), 1u);
  const Assignment& a = out.prefill[0];
  EXPECT_EQ(a.side, ReadSide::kSplit);
  EXPECT_EQ(a.prefill_read_tokens + a.decode_read_tokens, 3000);
  EXPECT_EQ(a.prefill_read_tokens, 1024);
  EXPECT_EQ(sched_->NodeReadQueue(NodeId(0)), 5000 + 1024);
  EXPECT_EQ(sched_->NodeReadQueue(NodeId(2)), 4000 + 3000 - 1024);
  EXPECT_EQ(sched_->stats().read_split, 1);
}

TEST_F(PrefillTest, PrefillFetchSeesOnlyRequestsWithADecodeEngine) {
  ASSERT_TRUE(sched_->Submit(Req(1, 100, 0)).ok());
  FetchResult out;
  ASSERT_TRUE(sched_->FetchForGroup(kPeGroup, {}, &out).ok());
  EXPECT_TRUE(out.prefill.empty());
  EXPECT_EQ(sched_->global_queue_size(), 1);
  EXPECT_EQ(sched_->pending(), 1);
}

TEST_F(PrefillTest, BadInputIsRejectedWithoutSideEffects) {
  EXPECT_EQ(sched_->Submit(Req(1, 0, 0)).code(), Code::kInvalidArgument);
  EXPECT_EQ(sched_->Submit(Req(1, 10, 11)).code(), Code::kInvalidArgument);
  EXPECT_EQ(sched_->Submit(Req(1, 10, 5, -1)).code(), Code::kInvalidArgument);
  EXPECT_EQ(sched_->stats().submitted, 0);

  ASSERT_TRUE(sched_->ApplyReports({{Report(0, 1, 10, 0)}}).ok());
  // The second report is bad: neither is applied.
  Status s = sched_->ApplyReports({{Report(0, 2, 20, 0), Report(99, 0, 0, 0)}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("99"), std::string::npos);
  EXPECT_EQ(sched_->View(EngineId(0)).unfinished_tokens, 10);
  EXPECT_EQ(sched_->ApplyReports({{Report(1, 0, -1, 0)}}).code(), Code::kInvalidArgument);

  FetchResult out;
  EXPECT_EQ(sched_->FetchForGroup(GroupId(7), {}, &out).code(), Code::kInvalidArgument);
}

TEST(SchedulerCreateTest, BadConfigOrClusterIsRejected) {
  SchedConfig c;
  c.unfinished_token_limit = 0;
  auto s = Scheduler::Create(Cluster(), c);
  EXPECT_EQ(s.status().code(), Code::kSchedBadConfig);
  EXPECT_EQ(Scheduler::Create(ClusterDesc{}, SchedConfig{}).status().code(), Code::kSchedBadConfig);
  auto ok = Scheduler::Create(Cluster(), SchedConfig{});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->leader(kDeGroup), EngineId(4));
  EXPECT_EQ((*ok)->group_role(kDeGroup), Role::kDecode);
  EXPECT_EQ((*ok)->group_of(EngineId(3)), kPeGroup);
}

}  // namespace
}  // namespace dualpath::sched
