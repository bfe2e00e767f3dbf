#include <gtest/gtest.h>

#include <map>

#include "dualpath/trace/workload.h"
#include "trace/test_util.h"

namespace dualpath::trace {
namespace {

using testing::SamplePath;

uint64_t SumHits(const Workload& w) {
  uint64_t sum = 0;
  for (const auto& session : IdealHitTokens(w, 64)) {
    for (uint64_t h : session) {
      sum += h;
    }
  }
  return sum;
}

TEST(MooncakeSessionsTest, GroupsTheSampleAndKeepsPromptsAndHits) {
  auto requests = ReadMooncakeJsonl(SamplePath("mooncake/conversation_trace_head200.jsonl"));
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  auto w = InferMooncakeSessions(*requests);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // The first 200 requests hold 7 two-turn conversations (checked independently in Python).
  EXPECT_EQ(w->sessions.size(), 193u);
  size_t multi = 0;
  size_t turns = 0;
  for (const Session& s : w->sessions) {
    multi += s.turns.size() > 1;
    turns += s.turns.size();
  }
  EXPECT_EQ(multi, 7u);
  EXPECT_EQ(turns, 200u);
  // Every turn reproduces its request's recorded prompt length, at its recorded arrival.
  std::map<double, std::vector<uint64_t>> inputs_at;  // arrival → input lengths
  for (const Session& r : requests->sessions) {
    inputs_at[r.turns[0].arrival_s].push_back(r.turns[0].append_tokens);
  }
  for (const Session& s : w->sessions) {
    for (size_t i = 0; i < s.turns.size(); ++i) {
      const auto& candidates = inputs_at[s.turns[i].arrival_s];
      EXPECT_NE(std::find(candidates.begin(), candidates.end(), PromptTokens(s, i)),
                candidates.end())
          << "session " << s.id << " turn " << i;
      if (i > 0) {
        EXPECT_GE(s.turns[i].arrival_s, s.turns[i - 1].arrival_s);
      }
    }
  }
  // Grouping changes neither the hash ids nor their order: the ideal hits are the same.
  EXPECT_EQ(SumHits(*w), SumHits(*requests));
}

TEST(MooncakeSessionsTest, ASharedSystemPromptAloneLinksNothing) {
  auto make = [](uint64_t id, double t, uint64_t in, std::vector<uint64_t> ids) {
    Session s;
    s.id = id;
    s.block_size = 4;
    s.start_s = t;
    s.turns = {Turn{.append_tokens = in, .gen_tokens = 2, .arrival_s = t, .hash_ids = ids}};
    return s;
  };
  Workload requests;
  requests.sessions = {make(0, 0, 10, {0, 1, 2}),         // conversation A, 2 full blocks
                       make(1, 1, 9, {0, 5, 6}),          // B: shares only block 0 → new
                       make(2, 2, 16, {0, 1, 3, 4}),      // A's next turn: 10 + 2 → append 4
                       make(3, 3, 17, {0, 1, 3, 4, 8})};  // A again, appended after the output
  auto w = InferMooncakeSessions(requests);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->sessions.size(), 2u);
  const Session& a = w->sessions[0];
  ASSERT_EQ(a.turns.size(), 3u);
  EXPECT_EQ(a.turns[1].append_tokens, 4u);
  EXPECT_EQ(PromptTokens(a, 1), 16u);
  // 17 < 16 + 2: the output was not carried whole; keep the 4 proven full blocks (16 tokens).
  EXPECT_EQ(a.turns[2].keep_tokens, 16u);
  EXPECT_EQ(PromptTokens(a, 2), 17u);
  EXPECT_EQ(w->sessions[1].turns.size(), 1u);
}

TEST(MooncakeSessionsTest, RejectsWorkloadsThatAreNotMooncakeRequests) {
  auto synthetic = GenerateSynthetic({.max_len_k = 32, .sessions = 2});
  ASSERT_TRUE(synthetic.ok());
  EXPECT_EQ(InferMooncakeSessions(*synthetic).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::trace
