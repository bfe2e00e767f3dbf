#include <gtest/gtest.h>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {
namespace {

TEST(ScaleTurnsTest, ScalesThenTruncatesAtMaxLen) {
  Workload w;
  Session s;
  s.turns = {Turn{.append_tokens = 100, .gen_tokens = 10},
             Turn{.append_tokens = 50, .gen_tokens = 5},
             Turn{.append_tokens = 30, .gen_tokens = 3}};
  w.sessions = {s};
  // x2 appends: (200, 10), (100, 5), (60, 3) → contexts 210, 315, 378.
  auto all = ScaleTurns(w, 2.0, 1.0, 1000);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->sessions[0].turns.size(), 3u);
  EXPECT_EQ(all->sessions[0].turns[1].append_tokens, 100u);
  EXPECT_EQ(all->sessions[0].turns[1].gen_tokens, 5u);
  EXPECT_EQ(TotalTokens(all->sessions[0]), 378u);
  // MaxLen 350 keeps the first two turns only.
  auto cut = ScaleTurns(w, 2.0, 1.0, 350);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->sessions[0].turns.size(), 2u);
  // A first turn that alone exceeds MaxLen is clipped, not dropped.
  auto clipped = ScaleTurns(w, 1.0, 1.0, 50);
  ASSERT_TRUE(clipped.ok());
  ASSERT_EQ(clipped->sessions[0].turns.size(), 1u);
  EXPECT_EQ(TotalTokens(clipped->sessions[0]), 50u);
  // Shrinking never rounds a turn to zero tokens.
  auto tiny = ScaleTurns(w, 0.001, 0.001, 1000);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->sessions[0].turns[2].gen_tokens, 1u);
}

TEST(ScaleTurnsTest, SyntheticLongerAppendsMeanFewerTurns) {
  auto w = GenerateSynthetic({.max_len_k = 64, .sessions = 100, .seed = 2});
  ASSERT_TRUE(w.ok());
  auto x2 = ScaleTurns(*w, 2.0, 1.0, 64 * 1024);
  ASSERT_TRUE(x2.ok());
  const WorkloadStats a = ComputeStats(*w, 64);
  const WorkloadStats b = ComputeStats(*x2, 64);
  EXPECT_LT(b.turns_per_session, a.turns_per_session);
  EXPECT_GT(b.append_mean, 1.5 * a.append_mean);
  for (const Session& s : x2->sessions) {
    EXPECT_LE(TotalTokens(s), 64u * 1024);
  }
}

TEST(ScaleTurnsTest, RejectsBadFactorsAndHashIdTraces) {
  Workload w;
  Session s;
  s.turns = {Turn{.append_tokens = 10, .gen_tokens = 1, .hash_ids = {1}}};
  w.sessions = {s};
  EXPECT_EQ(ScaleTurns(w, 1.0, 1.0, 100).status().code(), Code::kInvalidArgument);
  w.sessions[0].turns[0].hash_ids.clear();
  EXPECT_TRUE(ScaleTurns(w, 1.0, 1.0, 100).ok());
  EXPECT_EQ(ScaleTurns(w, 0.0, 1.0, 100).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ScaleTurns(w, 1.0, -2.0, 100).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ScaleTurns(w, 1.0, 1.0, 1).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::trace
