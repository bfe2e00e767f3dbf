// AttentionFit: the §6.2 time model fitted to measured per-rank attention times (non-negative
// least squares on relative error, with forgetting).
#include "dualpath/sched/attention_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dualpath::sched {
namespace {

// A rank's work in one batch: 1-4 chunks of the agentic shapes the PE sees (cached 0-3K, new
// 1-600 tokens).
RankWork RandomWork(std::mt19937_64& rng) {
  RankWork w;
  const int chunks = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < chunks; ++k) {
    w.Add(static_cast<int64_t>(rng() % 3000), 1 + static_cast<int64_t>(rng() % 600));
  }
  return w;
}

AttentionTimeModel Truth() {
  AttentionTimeModel m;
  m.fixed_ns = 3000;
  m.per_chunk_ns = 2000;
  m.per_token_ns = 1400;
  m.per_cached_pair_ns = 55;
  m.per_token_sq_ns = 14;
  m.per_cached_pair_ctx_ns = 0.004;
  return m;
}

TEST(AttentionFitTest, RecoversTheModelFromExactTimes) {
  std::mt19937_64 rng(1);
  AttentionFit fit;
  const AttentionTimeModel truth = Truth();
  for (int i = 0; i < 200; ++i) {
    const RankWork w = RandomWork(rng);
    fit.Add(w, w.PredictNs(truth));
  }
  AttentionTimeModel m;
  ASSERT_TRUE(fit.Fit(&m));
  EXPECT_NEAR(m.fixed_ns, truth.fixed_ns, 1e-3 * truth.fixed_ns);
  EXPECT_NEAR(m.per_chunk_ns, truth.per_chunk_ns, 1e-3 * truth.per_chunk_ns);
  EXPECT_NEAR(m.per_token_ns, truth.per_token_ns, 1e-3 * truth.per_token_ns);
  EXPECT_NEAR(m.per_cached_pair_ns, truth.per_cached_pair_ns, 1e-3 * truth.per_cached_pair_ns);
  EXPECT_NEAR(m.per_token_sq_ns, truth.per_token_sq_ns, 1e-3 * truth.per_token_sq_ns);
  EXPECT_NEAR(m.per_cached_pair_ctx_ns, truth.per_cached_pair_ctx_ns,
              1e-3 * truth.per_cached_pair_ctx_ns);
}

// Measurement noise of +-10% (a shared CPU): the fitted model still predicts within a few percent
// on average, which is what balancing needs.
TEST(AttentionFitTest, NoisyTimesPredictWithinTheNoise) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  AttentionFit fit;
  const AttentionTimeModel truth = Truth();
  for (int i = 0; i < 400; ++i) {
    const RankWork w = RandomWork(rng);
    fit.Add(w, w.PredictNs(truth) * noise(rng));
  }
  AttentionTimeModel m;
  ASSERT_TRUE(fit.Fit(&m));
  EXPECT_TRUE(m.Validate().ok());
  double err = 0;
  for (int i = 0; i < 200; ++i) {
    const RankWork w = RandomWork(rng);
    err += std::abs(w.PredictNs(m) / w.PredictNs(truth) - 1);
  }
  EXPECT_LT(err / 200, 0.02);
}

// Times that fall with bsz² (a truth PackBatch cannot use: its binary search needs time monotone
// in bsz). Unconstrained least squares recovers per_token_sq_ns = -0.05 exactly from these; the
// fit keeps every coefficient >= 0.
TEST(AttentionFitTest, CoefficientsStayNonNegative) {
  std::mt19937_64 rng(3);
  AttentionFit fit;
  for (int i = 0; i < 200; ++i) {
    const RankWork w = RandomWork(rng);
    fit.Add(w, 1e6 + 60 * w.pairs - 0.05 * w.sq);
  }
  AttentionTimeModel m;
  ASSERT_TRUE(fit.Fit(&m));
  EXPECT_TRUE(m.Validate().ok()) << m.Validate().ToString();
  EXPECT_GT(m.per_cached_pair_ns, 0.0);
}

// The machine slows down (every time doubles): with forgetting the model follows within a few
// hundred samples; without, it stays between the two regimes.
TEST(AttentionFitTest, ForgettingFollowsDrift) {
  const AttentionTimeModel truth = Truth();
  AttentionFit fading(0.98), keeping(1.0);
  std::mt19937_64 rng(4);
  for (int i = 0; i < 300; ++i) {
    const RankWork w = RandomWork(rng);
    fading.Add(w, w.PredictNs(truth));
    keeping.Add(w, w.PredictNs(truth));
  }
  for (int i = 0; i < 300; ++i) {
    const RankWork w = RandomWork(rng);
    fading.Add(w, 2 * w.PredictNs(truth));
    keeping.Add(w, 2 * w.PredictNs(truth));
  }
  AttentionTimeModel f, k;
  ASSERT_TRUE(fading.Fit(&f));
  ASSERT_TRUE(keeping.Fit(&k));
  const RankWork probe = RandomWork(rng);
  EXPECT_NEAR(probe.PredictNs(f) / probe.PredictNs(truth), 2.0, 0.02);
  EXPECT_LT(probe.PredictNs(k) / probe.PredictNs(truth), 1.8);
}

TEST(AttentionFitTest, TooFewOrUselessSamplesGiveNoFit) {
  AttentionFit fit;
  AttentionTimeModel m = Truth();
  EXPECT_FALSE(fit.Fit(&m));
  RankWork w;
  w.Add(100, 10);
  fit.Add(w, 0);           // no time: ignored
  fit.Add(RankWork{}, 5);  // no work: ignored
  EXPECT_EQ(fit.samples(), 0u);
  for (int i = 0; i < 10; ++i) fit.Add(w, 1000);
  // Ten copies of one sample cannot separate five terms, but one term explains them exactly.
  ASSERT_TRUE(fit.Fit(&m));
  EXPECT_NEAR(w.PredictNs(m), 1000, 1e-6);
}

TEST(AttentionFitTest, RankWorkOfSumsEachRanksChunks) {
  const std::vector<PrefillWork> q = {{100, 50}, {0, 20}, {3000, 7}};
  BatchPlan plan;
  plan.entries = {{0, 50, false, 1}, {1, 10, true, 0}, {2, 7, false, 1}};
  std::vector<RankWork> w(3);
  RankWorkOf(q, plan, 3, w);
  EXPECT_EQ(w[0].chunks, 1);
  EXPECT_EQ(w[0].tokens, 10);
  EXPECT_EQ(w[0].pairs, 0);
  EXPECT_EQ(w[1].chunks, 2);
  EXPECT_EQ(w[1].tokens, 57);
  EXPECT_EQ(w[1].pairs, 50 * 100 + 7 * 3000);
  EXPECT_EQ(w[1].sq, 50 * 50 + 7 * 7);
  EXPECT_EQ(w[1].pairs_ctx, 50.0 * 100 * 100 + 7.0 * 3000 * 3000);
  EXPECT_TRUE(w[2].empty());
  EXPECT_EQ(w[2].PredictNs(Truth()), 0);
}

}  // namespace
}  // namespace dualpath::sched
