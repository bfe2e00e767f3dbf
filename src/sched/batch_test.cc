// Intra-engine scheduling (§6.2): FIFO packing under the compute quota, binary-searched chunk of
// the last request, progress and HBM rules.
#include "dualpath/sched/batch.h"

#include <gtest/gtest.h>

#include <vector>

namespace dualpath::sched {
namespace {

// 1 µs per new token, 1 ns per (new, cached) pair, 0.5 ns per new² , 2 ms fixed.
AttentionTimeModel Model() {
  AttentionTimeModel m;
  m.fixed_ns = 2e6;
  m.per_token_ns = 1000;
  m.per_cached_pair_ns = 1;
  m.per_token_sq_ns = 0.5;
  return m;
}

BatchLimits Limits(Nanos quota_ms = 300) {
  BatchLimits l;
  l.compute_quota = quota_ms * kNanosPerMilli;
  l.min_chunk_tokens = 64;
  return l;
}

double Predict(const AttentionTimeModel& m, const std::vector<PrefillWork>& q,
               const BatchPlan& plan) {
  double t = m.fixed_ns;
  for (const BatchEntry& e : plan.entries) t += m.ItemNs(q[e.index].cached_tokens, e.bsz);
  return t;
}

TEST(BatchTest, EverythingFitsWhole) {
  std::vector<PrefillWork> q = {{30000, 400}, {20000, 600}, {0, 1000}};
  BatchPlan plan;
  ASSERT_TRUE(PackBatch(q, Model(), Limits(), &plan).ok());
  ASSERT_EQ(plan.entries.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.entries[i].index, i);
    EXPECT_EQ(plan.entries[i].bsz, q[i].remaining_tokens);
    EXPECT_FALSE(plan.entries[i].chunked);
  }
  EXPECT_EQ(plan.tokens, 2000);
  EXPECT_DOUBLE_EQ(plan.predicted_ns, Predict(Model(), q, plan));
  EXPECT_LE(plan.predicted_ns, 300e6);
}

TEST(BatchTest, LastRequestIsChunkedToTheLargestFittingSize) {
  // Each 100K-token request costs ~1e8 + ... ns: the third does not fit whole.
  std::vector<PrefillWork> q = {{1000, 100'000}, {0, 100'000}, {5000, 100'000}, {0, 10}};
  const AttentionTimeModel m = Model();
  BatchPlan plan;
  ASSERT_TRUE(PackBatch(q, m, Limits(), &plan).ok());
  ASSERT_EQ(plan.entries.size(), 1u);  // 100K new tokens alone cost 1e8 + 1e8 + 5e9 (sq) ns
  const BatchEntry& e = plan.entries[0];
  EXPECT_TRUE(e.chunked);
  EXPECT_LT(e.bsz, 100'000);
  // Largest: bsz fits, bsz + 1 does not.
  const double quota = 300e6;
  EXPECT_LE(m.fixed_ns + m.ItemNs(1000, e.bsz), quota);
  EXPECT_GT(m.fixed_ns + m.ItemNs(1000, e.bsz + 1), quota);
  EXPECT_LE(plan.predicted_ns, quota);
}

TEST(BatchTest, ChunkFillsTheRemainingQuotaAfterWholeRequests) {
  AttentionTimeModel m;
  m.per_token_ns = 1e6;  // 1 ms per token, linear: easy arithmetic
  std::vector<PrefillWork> q = {{0, 100}, {0, 100}, {0, 500}, {0, 1}};
  BatchPlan plan;
  ASSERT_TRUE(PackBatch(q, m, Limits(), &plan).ok());
  ASSERT_EQ(plan.entries.size(), 3u);  // the chunk closes the batch: request 3 waits (FIFO)
  EXPECT_EQ(plan.entries[2].index, 2u);
  EXPECT_EQ(plan.entries[2].bsz, 100);  // 300 ms - 100 - 100
  EXPECT_TRUE(plan.entries[2].chunked);
  EXPECT_EQ(plan.tokens, 300);
  EXPECT_DOUBLE_EQ(plan.predicted_ns, 300e6);  // exactly at the quota is allowed
  // A chunk of exactly min_chunk_tokens is taken.
  std::vector<PrefillWork> q2 = {{0, 236}, {0, 500}};
  ASSERT_TRUE(PackBatch(q2, m, Limits(), &plan).ok());
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[1].bsz, 64);
}

TEST(BatchTest, TooSmallTailChunkClosesTheBatchWithoutIt) {
  AttentionTimeModel m;
  m.per_token_ns = 1e6;
  // After 280 tokens only 20 fit: below min_chunk 64, so request 2 is left out, and FIFO means
  // the small request behind it is not considered either.
  std::vector<PrefillWork> q = {{0, 280}, {0, 500}, {0, 5}};
  BatchPlan plan;
  ASSERT_TRUE(PackBatch(q, m, Limits(), &plan).ok());
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.entries[0].bsz, 280);
  EXPECT_EQ(plan.tokens, 280);
}

TEST(BatchTest, HeadThatCannotFitStillMakesProgress) {
  AttentionTimeModel m;
  m.fixed_ns = 400e6;  // over the quota before any token
  m.per_token_ns = 1;
  std::vector<PrefillWork> q = {{0, 1000}, {0, 10}};
  BatchPlan plan;
  ASSERT_TRUE(PackBatch(q, m, Limits(), &plan).ok());
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.entries[0].bsz, 64);
  EXPECT_TRUE(plan.entries[0].chunked);
  // A head shorter than min_chunk runs whole.
  std::vector<PrefillWork> q2 = {{0, 30}};
  ASSERT_TRUE(PackBatch(q2, m, Limits(), &plan).ok());
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.entries[0].bsz, 30);
  EXPECT_FALSE(plan.entries[0].chunked);
}

TEST(BatchTest, KvTokenLimitWithoutLayerwisePrefill) {
  AttentionTimeModel m;
  m.per_token_ns = 1;  // time never binds
  BatchLimits l = Limits();
  l.max_batch_kv_tokens = 50'000;
  std::vector<PrefillWork> q = {{30'000, 1000}, {15'000, 5000}, {0, 10}};
  BatchPlan plan;
  ASSERT_TRUE(PackBatch(q, m, l, &plan).ok());
  // 31K whole; the second has room for 50K - 31K - 15K = 4K of its 5K tokens.
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[1].bsz, 4000);
  EXPECT_TRUE(plan.entries[1].chunked);
  // A head whose cached KV alone exceeds HBM can never run: an error, not a silent stall.
  std::vector<PrefillWork> big = {{60'000, 10}};
  EXPECT_EQ(PackBatch(big, m, l, &plan).code(), Code::kResourceExhausted);
}

TEST(BatchTest, EmptyQueueGivesEmptyPlan) {
  BatchPlan plan;
  plan.entries.push_back({});
  ASSERT_TRUE(PackBatch({}, Model(), Limits(), &plan).ok());
  EXPECT_TRUE(plan.entries.empty());
  EXPECT_EQ(plan.predicted_ns, 0);
}

TEST(BatchTest, BadInputIsNamed) {
  BatchPlan plan;
  AttentionTimeModel m = Model();
  m.per_cached_pair_ns = -1;
  Status s = PackBatch({}, m, Limits(), &plan);
  EXPECT_EQ(s.code(), Code::kSchedBadConfig);
  EXPECT_NE(s.message().find("per_cached_pair_ns"), std::string::npos);
  BatchLimits l = Limits();
  l.compute_quota = 0;
  EXPECT_NE(PackBatch({}, Model(), l, &plan).message().find("compute_quota"), std::string::npos);
  l = Limits();
  l.max_batch_kv_tokens = -1;
  EXPECT_EQ(PackBatch({}, Model(), l, &plan).code(), Code::kSchedBadConfig);
  std::vector<PrefillWork> q = {{0, 10}, {-1, 10}};
  s = PackBatch(q, Model(), Limits(), &plan);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("queue[1]"), std::string::npos);
  std::vector<PrefillWork> q0 = {{0, 0}};
  EXPECT_EQ(PackBatch(q0, Model(), Limits(), &plan).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::sched
