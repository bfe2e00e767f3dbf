// Intra-engine scheduling (§6.2): FIFO packing under the compute quota, binary-searched chunk of
// the last request, progress and HBM rules.
#include "dualpath/sched/batch.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "dualpath/sched/types.h"

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

// Issue 25 item 10: `dualpath sim --trace weka-claude-code --system basic` stopped with "queue[0]
// has 332571 cached tokens, more than max_batch_kv_tokens 332571 allows". The two equal numbers
// were no off-by-one: a prompt longer than the limit had been chunked until its cached KV filled
// the limit exactly. Such a head is refused before any chunk is spent, naming both sizes.
TEST(BatchTest, PromptOverTheKvLimitIsRefusedBeforeAnyChunk) {
  AttentionTimeModel m;
  m.per_token_ns = 1;
  BatchLimits l = Limits();
  l.max_batch_kv_tokens = 50'000;
  BatchPlan plan;
  const std::vector<PrefillWork> fresh = {{0, 50'001}, {0, 10}};
  Status s = PackBatch(fresh, m, l, &plan);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("needs 50001 tokens of KV (0 cached + 50001 to compute), more than "
                             "max_batch_kv_tokens 50000"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(plan.entries.empty());
  // The state the old code reached after its chunks: cached KV exactly at the limit.
  const std::vector<PrefillWork> filled = {{50'000, 7}};
  s = PackBatch(filled, m, l, &plan);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("needs 50007 tokens of KV (50000 cached + 7 to compute)"),
            std::string::npos)
      << s.message();
}

// The per-batch KV budget never stalls a request that fits it alone: a prompt of exactly the
// limit, fed back chunk by chunk as the simulator does, runs to completion.
TEST(BatchTest, PromptAtTheKvLimitRunsToCompletion) {
  AttentionTimeModel m;
  m.per_token_ns = 1;
  m.per_token_sq_ns = 1;  // chunks well below the whole prompt: 300 ms fits ~17K new tokens
  BatchLimits l = Limits();
  l.max_batch_kv_tokens = 50'000;
  PrefillWork w{1'000, 49'000};  // 1,000 hit tokens + 49,000 to compute = the limit
  BatchPlan plan;
  int forwards = 0;
  while (w.remaining_tokens > 0) {
    ASSERT_LT(++forwards, 100);
    ASSERT_TRUE(PackBatch(std::vector<PrefillWork>{w}, m, l, &plan).ok());
    ASSERT_EQ(plan.entries.size(), 1u);
    const int64_t bsz = plan.entries[0].bsz;
    ASSERT_GT(bsz, 0);
    EXPECT_LE(w.cached_tokens + bsz, l.max_batch_kv_tokens);
    w.cached_tokens += bsz;
    w.remaining_tokens -= bsz;
  }
  EXPECT_GT(forwards, 1);  // it was chunked, and its last chunk ended exactly at the limit
  EXPECT_EQ(w.cached_tokens, 50'000);
  // The last token of a prompt at the limit: cached = limit - 1.
  ASSERT_TRUE(PackBatch(std::vector<PrefillWork>{{49'999, 1}}, m, l, &plan).ok());
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.entries[0].bsz, 1);
}

TEST(TooLongTest, EachSideAgainstItsLargestEngine) {
  // Capacities: prefill 1,000, decode 1,200 tokens.
  EXPECT_EQ(CheckTooLong(1'000, 200, 1'000, 1'200), TooLong::kFits);  // both exactly full
  EXPECT_EQ(CheckTooLong(1'001, 0, 1'000, 1'200), TooLong::kPrefill);
  EXPECT_EQ(CheckTooLong(1'000, 201, 1'000, 1'200), TooLong::kDecode);
  // The prefill side is named first when both fail.
  EXPECT_EQ(CheckTooLong(5'000, 5'000, 1'000, 1'200), TooLong::kPrefill);
  // <= 0: unbounded (layerwise prefill holds one layer at a time) or not known yet.
  EXPECT_EQ(CheckTooLong(5'000, 5'000, 0, 1'200), TooLong::kDecode);
  EXPECT_EQ(CheckTooLong(5'000, 5'000, 0, 0), TooLong::kFits);
  EXPECT_EQ(CheckTooLong(5'000, 5'000, -1, -1), TooLong::kFits);
  // No wrap-around on huge sizes.
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(CheckTooLong(big, big, 0, big), TooLong::kDecode);
  EXPECT_EQ(CheckTooLong(1, big - 1, 0, big), TooLong::kFits);
  EXPECT_EQ(TooLongName(TooLong::kDecode), "decode");
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
