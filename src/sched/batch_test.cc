// Intra-engine scheduling (§6.2): FIFO packing under the compute quota, binary-searched chunk of
// the last request, progress and HBM rules.
#include "dualpath/sched/batch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
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

// PackBatchPrefix (the simulator's bounded read of a ready queue, issue 27) against PackBatch
// over the whole queue: the same entries, tokens, prediction and status on random queues of
// every length around the prefix sizes, with and without a KV limit, from any first prefix; and
// it reads fewer requests than the queue holds when the batch closes early.
TEST(BatchTest, PrefixPackingPlansLikeTheWholeQueue) {
  std::mt19937_64 rng(27);
  const AttentionTimeModel m = Model();
  int read_less = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<PrefillWork> q(rng() % 70);
    // Small requests, so that many fit whole and the prefix has to grow; some large ones.
    for (PrefillWork& w : q) {
      w.cached_tokens = static_cast<int64_t>(rng() % 3000);
      w.remaining_tokens = 1 + static_cast<int64_t>(rng() % (rng() % 8 == 0 ? 40000 : 2500));
    }
    BatchLimits limits = Limits(static_cast<Nanos>(20 + rng() % 400));
    if (rng() % 3 == 0) limits.max_batch_kv_tokens = 45000 + static_cast<int64_t>(rng() % 60000);
    const size_t first = rng() % 20;
    BatchPlan whole, prefix;
    const Status ws = PackBatch(q, m, limits, &whole);
    std::vector<PrefillWork> work;
    size_t reads = 0;
    const Status ps = PackBatchPrefix(
        q.size(),
        [&](size_t i) {
          ++reads;
          return q[i];
        },
        m, limits, &work, &prefix, first);
    ASSERT_EQ(ws.code(), ps.code()) << "trial " << trial;
    if (!ws.ok()) continue;
    ASSERT_EQ(whole.entries.size(), prefix.entries.size()) << "trial " << trial;
    for (size_t i = 0; i < whole.entries.size(); ++i) {
      EXPECT_EQ(whole.entries[i].index, prefix.entries[i].index);
      EXPECT_EQ(whole.entries[i].bsz, prefix.entries[i].bsz);
      EXPECT_EQ(whole.entries[i].chunked, prefix.entries[i].chunked);
    }
    EXPECT_EQ(whole.tokens, prefix.tokens);
    EXPECT_EQ(whole.predicted_ns, prefix.predicted_ns);
    EXPECT_EQ(reads, work.size());  // each request read once
    if (reads < q.size()) ++read_less;
  }
  EXPECT_GT(read_less, 500);
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

// ---- PackRanks: an engine's data-parallel attention ranks ----

double MaxAvg(const std::vector<double>& t) {
  double sum = 0, mx = 0;
  for (double v : t) {
    sum += v;
    mx = std::max(mx, v);
  }
  return mx * static_cast<double>(t.size()) / sum;
}

// What every plan must satisfy: entries in queue order, one per request, 1 <= bsz <= remaining,
// chunked iff a part, ranks in range, tokens and rank_ns consistent with the entries.
void CheckPlan(const std::vector<PrefillWork>& q, const AttentionTimeModel& m, uint32_t ranks,
               const BatchPlan& plan) {
  std::vector<double> t(ranks, 0.0);
  int64_t tokens = 0;
  for (size_t k = 0; k < plan.entries.size(); ++k) {
    const BatchEntry& e = plan.entries[k];
    if (k > 0) {
      EXPECT_GT(e.index, plan.entries[k - 1].index);
    }
    ASSERT_LT(e.index, q.size());
    ASSERT_LT(e.rank, ranks);
    EXPECT_GE(e.bsz, 1);
    EXPECT_LE(e.bsz, q[e.index].remaining_tokens);
    EXPECT_EQ(e.chunked, e.bsz < q[e.index].remaining_tokens);
    if (t[e.rank] == 0) t[e.rank] = m.fixed_ns;
    t[e.rank] += m.ItemNs(q[e.index].cached_tokens, e.bsz);
    tokens += e.bsz;
  }
  EXPECT_EQ(plan.tokens, tokens);
  ASSERT_EQ(plan.rank_ns.size(), ranks);
  for (uint32_t r = 0; r < ranks; ++r) EXPECT_NEAR(plan.rank_ns[r], t[r], 1e-3 * t[r] + 1);
  EXPECT_DOUBLE_EQ(plan.predicted_ns, *std::max_element(t.begin(), t.end()));
}

// A long queue: every rank fills to the quota, so the ranks are equal (§6.2, Figure 14).
TEST(PackRanksTest, SaturatedQueueFillsEveryRankToTheQuota) {
  std::vector<PrefillWork> q;
  for (int i = 0; i < 40; ++i) q.push_back({1000 * (i % 7), 3000 + 997 * (i % 5)});
  const AttentionTimeModel m = Model();
  BatchPlan plan;
  ASSERT_TRUE(PackRanks(q, m, Limits(), 4, RankPlacement::kPacked, &plan).ok());
  CheckPlan(q, m, 4, plan);
  for (double t : plan.rank_ns) {
    EXPECT_LE(t, 300e6);
    EXPECT_GE(t, 300e6 * 0.95);
  }
  EXPECT_LE(MaxAvg(plan.rank_ns), 1.05);
}

// Less work than the ranks' quota: split evenly (chunking the big request), where round-robin
// placement of the engine-wide plan leaves one rank with the big request.
TEST(PackRanksTest, UnderloadedQueueIsSplitEvenlyUnlikeRoundRobin) {
  const std::vector<PrefillWork> q = {{0, 9000},   {2000, 1500}, {0, 2000},
                                      {500, 1800}, {0, 1200},    {100, 2500}};
  const AttentionTimeModel m = Model();
  BatchPlan packed, rr;
  ASSERT_TRUE(PackRanks(q, m, Limits(), 4, RankPlacement::kPacked, &packed).ok());
  ASSERT_TRUE(PackRanks(q, m, Limits(), 4, RankPlacement::kRoundRobin, &rr).ok());
  CheckPlan(q, m, 4, packed);
  CheckPlan(q, m, 4, rr);
  EXPECT_TRUE(packed.entries[0].chunked);  // the 9000-token head alone is over a fair share
  EXPECT_EQ(rr.entries.size(), q.size());  // everything fits the engine-wide quota whole
  for (size_t k = 0; k < rr.entries.size(); ++k) EXPECT_EQ(rr.entries[k].rank, k % 4);
  EXPECT_LE(MaxAvg(packed.rank_ns), 1.10);
  EXPECT_GT(MaxAvg(rr.rank_ns), MaxAvg(packed.rank_ns) + 0.2);
}

// No more requests than ranks: each whole on a rank of its own (some ranks idle whatever the
// placement; cutting the big one to match the small ones would only make the batches smaller).
TEST(PackRanksTest, FewRequestsGetARankEach) {
  const std::vector<PrefillWork> q = {{0, 5000}, {100, 700}, {0, 300}};
  BatchPlan plan;
  ASSERT_TRUE(PackRanks(q, Model(), Limits(), 4, RankPlacement::kPacked, &plan).ok());
  CheckPlan(q, Model(), 4, plan);
  ASSERT_EQ(plan.entries.size(), 3u);
  std::set<uint32_t> used;
  for (const BatchEntry& e : plan.entries) {
    EXPECT_FALSE(e.chunked);
    used.insert(e.rank);
  }
  EXPECT_EQ(used.size(), 3u);
}

// Round-robin is PackBatch's plan for the whole engine's quota, entries dealt out in turn.
TEST(PackRanksTest, RoundRobinIsTheEngineWidePlanDealtOut) {
  std::vector<PrefillWork> q;
  for (int i = 0; i < 30; ++i) q.push_back({0, 2000 + 1500 * (i % 4)});
  BatchPlan rr, whole;
  ASSERT_TRUE(PackRanks(q, Model(), Limits(), 3, RankPlacement::kRoundRobin, &rr).ok());
  BatchLimits engine = Limits();
  engine.compute_quota *= 3;
  ASSERT_TRUE(PackBatch(q, Model(), engine, &whole).ok());
  ASSERT_EQ(rr.entries.size(), whole.entries.size());
  for (size_t k = 0; k < rr.entries.size(); ++k) {
    EXPECT_EQ(rr.entries[k].index, whole.entries[k].index);
    EXPECT_EQ(rr.entries[k].bsz, whole.entries[k].bsz);
    EXPECT_EQ(rr.entries[k].rank, k % 3);
  }
  CheckPlan(q, Model(), 3, rr);
}

// Random queues (sizes, cached prefixes, rank counts): the invariants hold, every rank stays
// within the quota unless the head alone exceeds it (progress), and packed is never less
// balanced than round-robin by more than a chunk's granularity.
TEST(PackRanksTest, RandomQueuesKeepTheInvariants) {
  std::mt19937_64 rng(28);
  const AttentionTimeModel m = Model();
  int better = 0, trials = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t ranks = 1 + static_cast<uint32_t>(rng() % 6);
    std::vector<PrefillWork> q(1 + rng() % 20);
    for (PrefillWork& w : q) {
      w.cached_tokens = static_cast<int64_t>(rng() % 20000);
      w.remaining_tokens = 1 + static_cast<int64_t>(rng() % 12000);
    }
    BatchPlan packed, rr;
    ASSERT_TRUE(PackRanks(q, m, Limits(), ranks, RankPlacement::kPacked, &packed).ok());
    ASSERT_TRUE(PackRanks(q, m, Limits(), ranks, RankPlacement::kRoundRobin, &rr).ok());
    CheckPlan(q, m, ranks, packed);
    CheckPlan(q, m, ranks, rr);
    ASSERT_FALSE(packed.entries.empty());
    EXPECT_EQ(packed.entries[0].index, 0u);  // the head always progresses
    if (packed.entries.size() > 1) {
      for (double t : packed.rank_ns) EXPECT_LE(t, 300e6 + 1);
    }
    ++trials;
    if (MaxAvg(packed.rank_ns) <= MaxAvg(rr.rank_ns) + 1e-9) ++better;
  }
  // Round-robin wins only by luck of the deal on a few queues.
  EXPECT_GE(better, trials * 9 / 10);
}

// The water-level bound (§6.2 packing against its own model) in the loaded regime, where the
// queue holds more than the ranks take: no rank's load (its predicted time without fixed_ns) is
// over the level the plan was placed at, and none is below it by a minimum chunk or more - a batch
// closes only when the least-loaded rank cannot take min_chunk_tokens of the next request. So the
// predicted max/avg is at most (L + fixed) / (L + fixed - δ), δ the costliest such minimum chunk.
// Checked over random queues and models, with a per-chunk cost and fine and coarse minimum
// chunks. (When the whole queue fits, a request cannot be split across ranks, so some ranks may
// end lower: that is the granularity the engine's min chunk and the plan's rounds work against.)
TEST(PackRanksTest, PackedRanksAreWithinAMinimumChunkOfTheWaterLevel) {
  std::mt19937_64 rng(62);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    AttentionTimeModel m;
    m.fixed_ns = static_cast<double>(rng() % 3) * 1e5;
    m.per_chunk_ns = static_cast<double>(rng() % 4) * 5e4;
    m.per_token_ns = 500 + static_cast<double>(rng() % 2000);
    m.per_cached_pair_ns = 10 + static_cast<double>(rng() % 60);
    m.per_token_sq_ns = m.per_cached_pair_ns / (1 + static_cast<double>(rng() % 4));
    BatchLimits limits = Limits(20);
    limits.min_chunk_tokens = (rng() % 2) != 0 ? 8 : 64;
    const uint32_t ranks = 2 + static_cast<uint32_t>(rng() % 5);
    std::vector<PrefillWork> q(ranks + 4 + rng() % 30);
    for (PrefillWork& w : q) {
      w.cached_tokens = static_cast<int64_t>(rng() % 3000);
      // Mostly agentic appends (tens of tokens), now and then a first turn.
      w.remaining_tokens = 1 + static_cast<int64_t>(rng() % 8 == 0 ? rng() % 3000 : rng() % 200);
    }
    double delta = 0;
    for (const PrefillWork& w : q) {
      delta = std::max(
          delta, m.ItemNs(w.cached_tokens, std::min(limits.min_chunk_tokens, w.remaining_tokens)));
    }
    BatchPlan plan;
    ASSERT_TRUE(PackRanks(q, m, limits, ranks, RankPlacement::kPacked, &plan).ok());
    CheckPlan(q, m, ranks, plan);
    const double level = plan.level_ns;
    // The head alone over the level runs anyway (progress); no bound is claimed then.
    if (m.ItemNs(q[0].cached_tokens, std::min(limits.min_chunk_tokens, q[0].remaining_tokens)) >
        level) {
      continue;
    }
    for (uint32_t r = 0; r < ranks; ++r) {
      const double load = plan.rank_ns[r] > 0 ? plan.rank_ns[r] - m.fixed_ns : 0;
      EXPECT_LE(load, level * (1 + 1e-9)) << "trial " << trial << " rank " << r;
    }
    if (plan.entries.size() == q.size()) continue;  // the whole queue fits: not the loaded case
    for (uint32_t r = 0; r < ranks; ++r) {
      const double load = plan.rank_ns[r] > 0 ? plan.rank_ns[r] - m.fixed_ns : 0;
      EXPECT_GE(load, level - delta - 1e-6 * level) << "trial " << trial << " rank " << r;
    }
    if (level + m.fixed_ns > delta) {
      EXPECT_LE(MaxAvg(plan.rank_ns),
                (level + m.fixed_ns) / (level + m.fixed_ns - delta) * (1 + 1e-9))
          << "trial " << trial;
    }
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

// Chunked prefill run to the end (as the PE does: a batch's chunks advance their requests, the
// finished ones leave, the chunked ones stay at their place in the queue): every batch is a
// prefix of the FIFO queue (no request starts before an earlier one), each request gets exactly
// its tokens, in order, one chunk per batch, and every batch makes progress.
TEST(PackRanksTest, ChunkingConservesTokensAndOrder) {
  std::mt19937_64 rng(63);
  for (int trial = 0; trial < 100; ++trial) {
    const AttentionTimeModel m = Model();
    BatchLimits limits = Limits(20 + static_cast<Nanos>(rng() % 200));
    limits.min_chunk_tokens = 1 + static_cast<int64_t>(rng() % 64);
    const uint32_t ranks = 1 + static_cast<uint32_t>(rng() % 6);
    const RankPlacement placement =
        (rng() % 2) != 0 ? RankPlacement::kPacked : RankPlacement::kRoundRobin;
    struct Req {
      int id;
      PrefillWork w;
    };
    std::vector<Req> queue;
    std::vector<int64_t> want, start;
    for (int i = 0; i < 1 + static_cast<int>(rng() % 20); ++i) {
      const PrefillWork w{static_cast<int64_t>(rng() % 5000),
                          1 + static_cast<int64_t>(rng() % 4000)};
      queue.push_back({i, w});
      want.push_back(w.remaining_tokens);
      start.push_back(w.cached_tokens);
    }
    std::vector<int64_t> got(want.size(), 0);
    int next_new = 0;  // the lowest id never scheduled yet
    int batches = 0;
    std::vector<PrefillWork> work;
    BatchPlan plan;
    while (!queue.empty()) {
      ASSERT_LT(++batches, 100000) << "no progress";
      work.clear();
      for (const Req& r : queue) work.push_back(r.w);
      ASSERT_TRUE(PackRanks(work, m, limits, ranks, placement, &plan).ok());
      CheckPlan(work, m, ranks, plan);
      ASSERT_FALSE(plan.entries.empty());
      for (size_t k = 0; k < plan.entries.size(); ++k) {
        ASSERT_EQ(plan.entries[k].index, k) << "a batch must be a prefix of the queue";
        Req& r = queue[k];
        // The chunk continues exactly where the request's computed KV ends.
        EXPECT_EQ(r.w.cached_tokens, start[r.id] + got[r.id]);
        if (r.id >= next_new) {
          EXPECT_EQ(r.id, next_new) << "request " << r.id << " overtook " << next_new;
          next_new = r.id + 1;
        }
        got[r.id] += plan.entries[k].bsz;
        r.w.cached_tokens += plan.entries[k].bsz;
        r.w.remaining_tokens -= plan.entries[k].bsz;
      }
      std::erase_if(queue, [](const Req& r) { return r.w.remaining_tokens == 0; });
    }
    EXPECT_EQ(got, want) << "trial " << trial;
  }
}

TEST(PackRanksTest, ZeroRanksIsABadConfig) {
  BatchPlan plan;
  const std::vector<PrefillWork> q = {{0, 10}};
  EXPECT_EQ(PackRanks(q, Model(), Limits(), 0, RankPlacement::kPacked, &plan).code(),
            Code::kSchedBadConfig);
  EXPECT_EQ(PackRanks(q, Model(), Limits(), 2, RankPlacement::kPacked, &plan).code(), Code::kOk);
}

}  // namespace
}  // namespace dualpath::sched