// RefModel::ForwardLayerBatch / LogitsRows: batch invariance. A sequence's KV and logits are
// bit-identical (memcmp) whether it runs alone in one call, chunked, or in any forward batch with
// other sequences of ragged lengths and positions, in any order; decode steps batched the way a
// continuously batching decode engine runs them equal the one-at-a-time schedule, and so does the
// same batch with each sequence's attention placed on one of an engine's ranks (RankPool threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "dualpath/model/rank_pool.h"
#include "dualpath/model/ref_model.h"
#include "model/test_util.h"

namespace dualpath::model {
namespace {

using testing::OddMha;
using testing::PrefillOneCall;
using testing::PrefillResult;
using testing::RandomTokens;
using testing::SmallGqa;

// One sequence of a test batch: its whole token stream, the reference computed alone in one
// call, and the batch run's own KV buffer [layers][total][bpt] and logits [total][vocab].
struct Seq {
  std::vector<uint32_t> tokens;
  PrefillResult alone;
  std::vector<std::byte> kv;
  std::vector<float> logits;
  size_t computed = 0;  // positions [0, computed) are in kv
};

Seq MakeSeq(const RefModel& m, size_t total, uint64_t seed) {
  Seq s;
  s.tokens = RandomTokens(total, m.config().vocab, seed);
  s.alone = PrefillOneCall(m, s.tokens);
  const RefModelConfig& c = m.config();
  s.kv.assign(size_t{c.layers} * total * c.KvBytesPerTokenPerLayer(), std::byte{0});
  s.logits.assign(total * c.vocab, 0.0f);
  return s;
}

// Copies positions [0, upto) of every layer of the alone run's KV into s's buffer: cached KV that
// came from somewhere else (storage, another engine).
void SeedKv(const RefModel& m, Seq* s, size_t upto) {
  const size_t bpt = m.config().KvBytesPerTokenPerLayer();
  const size_t total = s->tokens.size();
  for (uint32_t l = 0; l < m.config().layers; ++l) {
    std::memcpy(s->kv.data() + l * total * bpt, s->alone.kv.data() + l * total * bpt, upto * bpt);
  }
  s->computed = upto;
}

// One forward batch through the whole model: sequence seqs[i] advances by counts[i] tokens from
// its `computed` position; the sequences are laid out in hidden in the order given.
// With `pool`, sequence i's attention runs on rank ranks[i] and each rank's attention CPU time is
// added to (*rank_ns)[rank].
void RunBatch(const RefModel& m, std::span<Seq*> seqs, std::span<const size_t> counts,
              RankPool* pool = nullptr, std::span<const uint32_t> ranks = {},
              std::vector<int64_t>* rank_ns = nullptr) {
  const RefModelConfig& c = m.config();
  const size_t h = c.hidden();
  const size_t bpt = c.KvBytesPerTokenPerLayer();
  const size_t rows = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<float> hidden(rows * h);
  size_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    m.Embed(std::span<const uint32_t>(seqs[i]->tokens).subspan(seqs[i]->computed, counts[i]),
            std::span<float>(hidden).subspan(row * h, counts[i] * h));
    row += counts[i];
  }
  std::vector<RefModel::BatchSeq> batch(seqs.size());
  for (uint32_t l = 0; l < c.layers; ++l) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      const size_t total = seqs[i]->tokens.size();
      // Exactly (start + n) tokens of span, as the engines pass them.
      batch[i] = {seqs[i]->computed, counts[i],
                  std::span<std::byte>(seqs[i]->kv.data() + l * total * bpt,
                                       (seqs[i]->computed + counts[i]) * bpt),
                  pool != nullptr ? ranks[i] : 0};
    }
    if (pool != nullptr) {
      m.ForwardLayerBatch(l, batch, hidden, *pool, *rank_ns);
    } else {
      m.ForwardLayerBatch(l, batch, hidden);
    }
  }
  std::vector<float> logits(rows * c.vocab);
  m.LogitsRows(hidden, logits);
  row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::memcpy(seqs[i]->logits.data() + seqs[i]->computed * c.vocab, logits.data() + row * c.vocab,
                counts[i] * c.vocab * sizeof(float));
    seqs[i]->computed += counts[i];
    row += counts[i];
  }
}

// memcmp of the positions [from, s.computed) of KV (every layer) and logits against the alone run.
::testing::AssertionResult MatchesAlone(const RefModel& m, const Seq& s, size_t from) {
  const RefModelConfig& c = m.config();
  const size_t bpt = c.KvBytesPerTokenPerLayer();
  const size_t total = s.tokens.size();
  for (uint32_t l = 0; l < c.layers; ++l) {
    const size_t off = l * total * bpt + from * bpt;
    if (std::memcmp(s.kv.data() + off, s.alone.kv.data() + off, (s.computed - from) * bpt) != 0) {
      return ::testing::AssertionFailure() << "KV of layer " << l << " differs";
    }
  }
  const size_t loff = from * c.vocab;
  if (std::memcmp(s.logits.data() + loff, s.alone.logits.data() + loff,
                  (s.computed - from) * c.vocab * sizeof(float)) != 0) {
    return ::testing::AssertionFailure() << "logits differ";
  }
  return ::testing::AssertionSuccess();
}

class BatchInvariance : public ::testing::TestWithParam<RefModelConfig> {};

// Random batches: 1-6 sequences, each with 0-60 positions of cached KV from elsewhere and 1-70
// new tokens, in a random order in the batch.
TEST_P(BatchInvariance, RandomRaggedBatchesEqualEachSequenceAlone) {
  auto m = testing::MakeModel(GetParam());
  ASSERT_NE(m, nullptr);
  std::mt19937_64 rng(2024);
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const size_t k = 1 + rng() % 6;
    std::vector<Seq> seqs;
    std::vector<size_t> counts, cached;
    for (size_t i = 0; i < k; ++i) {
      const size_t pre = rng() % 61;
      const size_t n = 1 + rng() % 70;
      seqs.push_back(MakeSeq(*m, pre + n, 1000 * trial + i));
      SeedKv(*m, &seqs.back(), pre);
      counts.push_back(n);
      cached.push_back(pre);
    }
    std::vector<size_t> order(k);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Seq*> ptrs;
    std::vector<size_t> ordered_counts;
    for (size_t i : order) {
      ptrs.push_back(&seqs[i]);
      ordered_counts.push_back(counts[i]);
    }
    RunBatch(*m, ptrs, ordered_counts);
    for (size_t i = 0; i < k; ++i) {
      EXPECT_TRUE(MatchesAlone(*m, seqs[i], cached[i])) << "trial " << trial << " seq " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 12);
}

// More rows than one internal pass (256): sequences are cut across passes at arbitrary points.
TEST_P(BatchInvariance, BatchLongerThanOnePassEqualsAlone) {
  auto m = testing::MakeModel(GetParam());
  ASSERT_NE(m, nullptr);
  std::vector<Seq> seqs;
  seqs.push_back(MakeSeq(*m, 300, 1));
  seqs.push_back(MakeSeq(*m, 7, 2));
  seqs.push_back(MakeSeq(*m, 190, 3));
  seqs.push_back(MakeSeq(*m, 1, 4));
  SeedKv(*m, &seqs[2], 10);
  std::vector<Seq*> ptrs = {&seqs[0], &seqs[1], &seqs[2], &seqs[3]};
  const std::vector<size_t> counts = {300, 7, 180, 1};
  RunBatch(*m, ptrs, counts);
  EXPECT_TRUE(MatchesAlone(*m, seqs[0], 0));
  EXPECT_TRUE(MatchesAlone(*m, seqs[1], 0));
  EXPECT_TRUE(MatchesAlone(*m, seqs[2], 10));
  EXPECT_TRUE(MatchesAlone(*m, seqs[3], 0));
}

// Continuous batching as a decode engine runs it: every step each active sequence advances one
// token; sequences join at step boundaries (after their prompt ran alone or in a prefill batch)
// and leave when done; the step's batch order changes from step to step.
TEST_P(BatchInvariance, DecodeStepsWithJoiningAndLeavingSequences) {
  auto m = testing::MakeModel(GetParam());
  ASSERT_NE(m, nullptr);
  std::mt19937_64 rng(7);
  struct Plan {
    size_t prompt, gen, join_step;
  };
  const std::vector<Plan> plans = {{5, 9, 0}, {17, 4, 0}, {1, 12, 2}, {40, 6, 3}, {9, 1, 5}};
  std::vector<Seq> seqs;
  for (size_t i = 0; i < plans.size(); ++i) {
    seqs.push_back(MakeSeq(*m, plans[i].prompt + plans[i].gen, 50 + i));
  }
  std::vector<Seq*> prefilled;  // prompts batched together as one prefill batch
  std::vector<size_t> prompt_counts;
  for (size_t i = 0; i < seqs.size(); ++i) {
    prefilled.push_back(&seqs[i]);
    prompt_counts.push_back(plans[i].prompt);
  }
  RunBatch(*m, prefilled, prompt_counts);
  int max_batch = 0;
  for (size_t step = 0;; ++step) {
    std::vector<Seq*> active;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (step >= plans[i].join_step && seqs[i].computed < seqs[i].tokens.size()) {
        active.push_back(&seqs[i]);
      }
    }
    if (active.empty() && step > plans.back().join_step) break;
    std::shuffle(active.begin(), active.end(), rng);
    const std::vector<size_t> ones(active.size(), 1);
    RunBatch(*m, active, ones);
    max_batch = std::max<int>(max_batch, static_cast<int>(active.size()));
  }
  EXPECT_GE(max_batch, 3);  // the schedule really batched several sequences
  for (const Seq& s : seqs) {
    ASSERT_EQ(s.computed, s.tokens.size());
    EXPECT_TRUE(MatchesAlone(*m, s, 0));
  }
}

// Rank placement (an engine's ranks, data-parallel attention): random ragged batches with every
// sequence's attention on a random rank of a 1-, 2- or 4-rank pool, several sequences per rank
// and idle ranks included, across more rows than one internal pass. KV and logits memcmp-equal
// the sequence alone; a rank with work reports attention time, an idle one none.
TEST_P(BatchInvariance, RankPlacedBatchesEqualEachSequenceAlone) {
  auto m = testing::MakeModel(GetParam());
  ASSERT_NE(m, nullptr);
  std::mt19937_64 rng(99);
  int checked = 0;
  for (uint32_t ranks : {1u, 2u, 4u}) {
    RankPool pool(ranks);
    for (int trial = 0; trial < 6; ++trial) {
      const size_t k = 1 + rng() % 7;
      std::vector<Seq> seqs;
      std::vector<size_t> counts, cached;
      std::vector<uint32_t> placed;
      std::vector<bool> busy(ranks, false);
      for (size_t i = 0; i < k; ++i) {
        const size_t pre = rng() % 61;
        const size_t n = 1 + rng() % (trial == 0 ? 200 : 70);  // trial 0: several passes
        seqs.push_back(MakeSeq(*m, pre + n, 5000 + 100 * ranks + 10 * trial + i));
        SeedKv(*m, &seqs.back(), pre);
        counts.push_back(n);
        cached.push_back(pre);
        placed.push_back(static_cast<uint32_t>(rng() % ranks));
        busy[placed.back()] = true;
      }
      std::vector<Seq*> ptrs;
      for (Seq& s : seqs) ptrs.push_back(&s);
      std::vector<int64_t> rank_ns(ranks, 0);
      RunBatch(*m, ptrs, counts, &pool, placed, &rank_ns);
      for (size_t i = 0; i < k; ++i) {
        EXPECT_TRUE(MatchesAlone(*m, seqs[i], cached[i]))
            << ranks << " ranks, trial " << trial << " seq " << i << " on rank " << placed[i];
        ++checked;
      }
      for (uint32_t r = 0; r < ranks; ++r) {
        if (busy[r]) {
          EXPECT_GT(rank_ns[r], 0) << "rank " << r << " had work";
        } else {
          EXPECT_EQ(rank_ns[r], 0) << "rank " << r << " was idle";
        }
      }
    }
  }
  EXPECT_GT(checked, 18);
}

INSTANTIATE_TEST_SUITE_P(Configs, BatchInvariance, ::testing::Values(SmallGqa(), OddMha()),
                         [](const auto& info) { return info.index == 0 ? "SmallGqa" : "OddMha"; });

// The default head shape (head_dim 32, the AVX2 unrolled path) in a decode-sized batch at
// different context lengths.
TEST(BatchInvarianceDefault, DecodeBatchAtMixedContexts) {
  RefModelConfig c;
  c.layers = 2;
  auto m = testing::MakeModel(c);
  ASSERT_NE(m, nullptr);
  std::vector<Seq> seqs;
  const std::vector<size_t> contexts = {3, 64, 129, 33};
  for (size_t i = 0; i < contexts.size(); ++i) {
    seqs.push_back(MakeSeq(*m, contexts[i] + 1, 90 + i));
    SeedKv(*m, &seqs.back(), contexts[i]);
  }
  std::vector<Seq*> ptrs = {&seqs[2], &seqs[0], &seqs[3], &seqs[1]};
  const std::vector<size_t> ones(4, 1);
  RunBatch(*m, ptrs, ones);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_TRUE(MatchesAlone(*m, seqs[i], contexts[i]));
}

TEST(BatchInvarianceDefault, LogitsRowsEqualsLogitsPerRow) {
  auto m = testing::MakeModel(OddMha());
  ASSERT_NE(m, nullptr);
  const RefModelConfig& c = m->config();
  const size_t rows = 13;  // not a multiple of the 8-row groups
  std::vector<float> hidden(rows * c.hidden());
  m->Embed(RandomTokens(rows, c.vocab, 5), hidden);
  std::vector<float> batched(rows * c.vocab), one(c.vocab);
  m->LogitsRows(hidden, batched);
  for (size_t r = 0; r < rows; ++r) {
    m->Logits(std::span<const float>(hidden).subspan(r * c.hidden(), c.hidden()), one);
    EXPECT_EQ(std::memcmp(one.data(), batched.data() + r * c.vocab, c.vocab * sizeof(float)), 0)
        << "row " << r;
  }
}

// Batches on one model from several threads at once (the tsan preset runs this).
TEST(BatchInvarianceDefault, ConcurrentBatchesOnOneModel) {
  auto m = testing::MakeModel(SmallGqa());
  ASSERT_NE(m, nullptr);
  constexpr int kThreads = 3;
  std::vector<std::vector<Seq>> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < 3; ++i) work[t].push_back(MakeSeq(*m, 20 + 7 * i + t, 300 + 10 * t + i));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Seq*> ptrs;
      std::vector<size_t> counts;
      for (Seq& s : work[t]) {
        ptrs.push_back(&s);
        counts.push_back(s.tokens.size());
      }
      RunBatch(*m, ptrs, counts);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& w : work) {
    for (const Seq& s : w) EXPECT_TRUE(MatchesAlone(*m, s, 0));
  }
}

// RankPool::Run calls each rank exactly once per Run, rank 0 on the caller's thread and every
// other rank on a thread of its own, and its writes are visible when Run returns (tsan checks
// the ordering).
TEST(RankPool, RunCallsEveryRankOnItsOwnThread) {
  constexpr uint32_t kRanks = 4;
  RankPool pool(kRanks);
  EXPECT_EQ(pool.ranks(), kRanks);
  std::vector<int> calls(kRanks, 0);
  std::vector<std::thread::id> ids(kRanks);
  for (int round = 0; round < 50; ++round) {
    pool.Run([&](uint32_t r) {
      ++calls[r];
      ids[r] = std::this_thread::get_id();
    });
  }
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(calls[r], 50) << "rank " << r;
    for (uint32_t q = 0; q < r; ++q) EXPECT_NE(ids[r], ids[q]) << "ranks " << q << " and " << r;
  }
}

}  // namespace
}  // namespace dualpath::model
