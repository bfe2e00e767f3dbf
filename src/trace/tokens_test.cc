#include "dualpath/trace/tokens.h"

#include <gtest/gtest.h>

#include <set>

namespace dualpath::trace {
namespace {

constexpr uint32_t kVocab = 129280;  // DeepSeek V3's vocabulary size

TEST(TokensTest, EqualHashIdsGiveEqualBlocks) {
  std::vector<uint32_t> a(64), b(64), c(64);
  BlockTokenIds(42, kVocab, a);
  BlockTokenIds(42, kVocab, b);
  BlockTokenIds(43, kVocab, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (uint32_t t : a) {
    EXPECT_LT(t, kVocab);
  }
  // Not a constant block: the tokens vary within a block.
  EXPECT_GT(std::set<uint32_t>(a.begin(), a.end()).size(), 32u);
}

TEST(TokensTest, HashIdSessionsFollowTheirBlocks) {
  Session s;
  s.block_size = 4;
  s.turns = {Turn{.append_tokens = 10, .gen_tokens = 2, .hash_ids = {7, 8}},
             Turn{.append_tokens = 5, .gen_tokens = 1, .hash_ids = {7, 8, 9, 10}}};
  const auto p0 = PromptTokenIds(s, 0, kVocab);
  const auto p1 = PromptTokenIds(s, 1, kVocab);
  ASSERT_EQ(p0.size(), 10u);
  ASSERT_EQ(p1.size(), 17u);
  // The shared blocks 7, 8 give the same first 8 tokens.
  EXPECT_TRUE(std::equal(p0.begin(), p0.begin() + 8, p1.begin()));
  std::vector<uint32_t> block9(4);
  BlockTokenIds(9, kVocab, block9);
  EXPECT_TRUE(std::equal(block9.begin(), block9.end(), p1.begin() + 8));
  EXPECT_EQ(AppendTokenIds(s, 1, kVocab), std::vector<uint32_t>(p1.end() - 5, p1.end()));
}

TEST(TokensTest, SyntheticPromptsArePrefixExtensions) {
  auto w = GenerateSynthetic({.max_len_k = 8, .sessions = 2, .seed = 1});
  ASSERT_TRUE(w.ok());
  const Session& s = w->sessions[0];
  ASSERT_GE(s.turns.size(), 2u);
  const auto p0 = PromptTokenIds(s, 0, kVocab);
  const auto p1 = PromptTokenIds(s, 1, kVocab);
  ASSERT_EQ(p1.size(), PromptTokens(s, 1));
  EXPECT_TRUE(std::equal(p0.begin(), p0.end(), p1.begin()));
  // Different sessions do not share tokens (DualPath hits stay within a trajectory).
  const auto other = PromptTokenIds(w->sessions[1], 0, kVocab);
  EXPECT_FALSE(std::equal(other.begin(), other.begin() + 64, p0.begin()));
}

}  // namespace
}  // namespace dualpath::trace
