#include <gtest/gtest.h>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {
namespace {

// Appendix A.3: prompt(i) = context(i) + append(i); context(i+1) = prompt(i) + gen(i).
TEST(ReplayTest, PromptExtendsPreviousContext) {
  Session s;
  s.turns = {Turn{.append_tokens = 100, .gen_tokens = 10},
             Turn{.append_tokens = 20, .gen_tokens = 5}, Turn{.append_tokens = 7, .gen_tokens = 3}};
  EXPECT_EQ(ContextTokens(s, 0), 0u);
  EXPECT_EQ(PromptTokens(s, 0), 100u);
  EXPECT_EQ(ContextTokens(s, 1), 110u);
  EXPECT_EQ(PromptTokens(s, 1), 130u);
  EXPECT_EQ(ContextTokens(s, 2), 135u);
  EXPECT_EQ(PromptTokens(s, 2), 142u);
  EXPECT_EQ(TotalTokens(s), 145u);
  EXPECT_EQ(Contexts(s), (std::vector<uint64_t>{0, 110, 135, 145}));
}

TEST(ReplayTest, HitsAreFullBlocksOfPreviousContext) {
  Session s;
  s.turns = {Turn{.append_tokens = 100, .gen_tokens = 10},
             Turn{.append_tokens = 20, .gen_tokens = 5}};
  EXPECT_EQ(HitTokens(s, 0, 64), 0u);   // nothing cached before the first turn
  EXPECT_EQ(HitTokens(s, 1, 64), 64u);  // 110 context tokens: one full 64-token block
  EXPECT_EQ(HitTokens(s, 1, 10), 110u);
  EXPECT_EQ(HitTokens(s, 1, 1), 110u);
}

TEST(ReplayTest, CompactionKeepsOnlyAPrefix) {
  Session s;
  s.turns = {Turn{.append_tokens = 1000, .gen_tokens = 100},
             Turn{.append_tokens = 50, .gen_tokens = 10, .keep_tokens = 300},
             Turn{.append_tokens = 5, .gen_tokens = 1}};
  EXPECT_EQ(ContextTokens(s, 1), 300u);
  EXPECT_EQ(PromptTokens(s, 1), 350u);
  EXPECT_EQ(ContextTokens(s, 2), 360u);
  EXPECT_EQ(HitTokens(s, 1, 64), 256u);
  // keep_tokens larger than the context keeps everything.
  s.turns[1].keep_tokens = 5000;
  EXPECT_EQ(ContextTokens(s, 1), 1100u);
  EXPECT_EQ(Contexts(s), (std::vector<uint64_t>{0, 1100, 1160, 1166}));
}

}  // namespace
}  // namespace dualpath::trace
