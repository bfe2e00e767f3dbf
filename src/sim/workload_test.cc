#include <gtest/gtest.h>

#include "dualpath/sim/simulator.h"

namespace dualpath::sim {
namespace {

TEST(ClusterShapeTest, ParsesPaperShapes) {
  auto a = ParseClusterShape("2P4D");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->prefill_nodes, 2u);
  EXPECT_EQ(a->decode_nodes, 4u);
  auto b = ParseClusterShape("48p96d");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefill_nodes, 48u);
  EXPECT_EQ(b->decode_nodes, 96u);
}

TEST(ClusterShapeTest, RejectsImpossibleShapes) {
  for (const char* bad :
       {"", "0P2D", "2P0D", "2X4D", "2P4", "P4D", "2P4D5", "-1P2D", "2P 4D", "9999999P1D"}) {
    auto r = ParseClusterShape(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("P/D"), std::string::npos) << r.status().message();
  }
}

TEST(ClusterShapeTest, NameRoundTrips) {
  EXPECT_EQ(ClusterShapeName({2, 4}), "2P4D");
  EXPECT_EQ(ClusterShapeName(*ParseClusterShape("48p96d")), "48P96D");
}

trace::Workload TwoTurns() {
  trace::Workload w;
  w.name = "t";
  trace::Session s;
  s.turns.push_back(trace::Turn{.append_tokens = 1000, .gen_tokens = 100});
  s.turns.push_back(trace::Turn{.append_tokens = 50, .gen_tokens = 20});
  w.sessions.push_back(s);
  return w;
}

TEST(CompactWorkloadTest, ReplaySemanticsOfAppendixA3) {
  auto c = CompactWorkload(TwoTurns(), 64);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->agents.size(), 1u);
  ASSERT_EQ(c->turns.size(), 2u);
  EXPECT_EQ(c->turns[0].hit, 0u);
  EXPECT_EQ(c->turns[0].prompt, 1000u);
  EXPECT_EQ(c->turns[0].gen, 100u);
  // Turn 1: prompt = 1100 context + 50; hits = full 64-token blocks of the 1100 context.
  EXPECT_EQ(c->turns[1].prompt, 1150u);
  EXPECT_EQ(c->turns[1].hit, 1088u);
}

TEST(CompactWorkloadTest, FullyCachedPromptRecomputesItsLastBlock) {
  trace::Workload w;
  trace::Session s;
  s.turns.push_back(trace::Turn{.append_tokens = 100, .gen_tokens = 28});  // context 128
  s.turns.push_back(trace::Turn{.append_tokens = 0, .gen_tokens = 5});     // prompt 128, all hit
  w.sessions.push_back(s);
  auto c = CompactWorkload(w, 64);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->turns[1].prompt, 128u);
  EXPECT_EQ(c->turns[1].hit, 64u);
}

TEST(CompactWorkloadTest, EmptyWorkloadIsAnError) {
  trace::Workload w;
  EXPECT_FALSE(CompactWorkload(w, 64).ok());
}

}  // namespace
}  // namespace dualpath::sim

namespace dualpath::sim {
namespace {

TEST(SampleAgentsTest, DrawsFromTheBaseDeterministically) {
  SimWorkload base;
  for (uint32_t i = 0; i < 5; ++i) {
    base.turns.push_back(SimTurn{.hit = 0, .prompt = 100 + i, .gen = 1});
    base.agents.push_back(SimAgent{.start_s = 0, .first_turn = i, .num_turns = 1});
  }
  const SimWorkload a = SampleAgents(base, 1000, 1);
  const SimWorkload b = SampleAgents(base, 1000, 1);
  const SimWorkload c = SampleAgents(base, 1000, 2);
  ASSERT_EQ(a.agents.size(), 1000u);
  EXPECT_EQ(a.turns.size(), base.turns.size());  // agents share the turn records
  int seen[5] = {};
  bool differs = false;
  for (size_t i = 0; i < a.agents.size(); ++i) {
    ASSERT_LT(a.agents[i].first_turn, 5u);
    EXPECT_EQ(a.agents[i].first_turn, b.agents[i].first_turn);
    differs = differs || a.agents[i].first_turn != c.agents[i].first_turn;
    seen[a.agents[i].first_turn]++;
  }
  EXPECT_TRUE(differs);
  for (int n : seen) EXPECT_GT(n, 150);  // uniform-ish: 200 expected each
}

}  // namespace
}  // namespace dualpath::sim
