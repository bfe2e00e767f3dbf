#include <gtest/gtest.h>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {
namespace {

TEST(SyntheticTest, SameSeedSameWorkload) {
  auto a = GenerateSynthetic({.max_len_k = 64, .sessions = 50, .seed = 7});
  auto b = GenerateSynthetic({.max_len_k = 64, .sessions = 50, .seed = 7});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->sessions.size(), 50u);
  for (size_t i = 0; i < a->sessions.size(); ++i) {
    const Session& x = a->sessions[i];
    const Session& y = b->sessions[i];
    ASSERT_EQ(x.turns.size(), y.turns.size());
    for (size_t j = 0; j < x.turns.size(); ++j) {
      EXPECT_EQ(x.turns[j].append_tokens, y.turns[j].append_tokens);
      EXPECT_EQ(x.turns[j].gen_tokens, y.turns[j].gen_tokens);
    }
  }
}

TEST(SyntheticTest, NeverExceedsMaxLen) {
  for (uint32_t k : {32u, 48u, 64u}) {
    auto w = GenerateSynthetic({.max_len_k = k, .sessions = 200, .seed = 3});
    ASSERT_TRUE(w.ok());
    for (const Session& s : w->sessions) {
      ASSERT_FALSE(s.turns.empty());
      EXPECT_LE(TotalTokens(s), uint64_t{k} * 1024);
    }
  }
}

}  // namespace
}  // namespace dualpath::trace
