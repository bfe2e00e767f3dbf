#include <gtest/gtest.h>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {
namespace {

TEST(StatsTest, TableTwoDefinitionsOnAHandBuiltWorkload) {
  Workload w;
  Session a;  // turns (append, gen): (128, 64), (64, 64) → prompts 128, 256; total 320
  a.id = 0;
  a.turns = {Turn{.append_tokens = 128, .gen_tokens = 64},
             Turn{.append_tokens = 64, .gen_tokens = 64}};
  Session b;  // one turn: prompt 100, total 150
  b.id = 1;
  b.turns = {Turn{.append_tokens = 100, .gen_tokens = 50}};
  w.sessions = {a, b};
  const WorkloadStats st = ComputeStats(w, 64);
  EXPECT_EQ(st.sessions, 2u);
  EXPECT_EQ(st.turns, 3u);
  EXPECT_DOUBLE_EQ(st.turns_per_session, 1.5);
  EXPECT_EQ(st.turns_median, 1u);  // lower median of {2, 1}
  EXPECT_EQ(st.turns_max, 2u);
  EXPECT_DOUBLE_EQ(st.append_mean, (96.0 + 100.0) / 2);  // per-session means, then mean
  EXPECT_DOUBLE_EQ(st.gen_mean, (64.0 + 50.0) / 2);
  EXPECT_DOUBLE_EQ(st.total_mean, (320.0 + 150.0) / 2);
  EXPECT_DOUBLE_EQ(st.context_mean, (192.0 + 100.0) / 2);
  EXPECT_DOUBLE_EQ(st.append_per_request, 292.0 / 3);
  EXPECT_EQ(st.prompt_tokens, 128u + 256u + 100u);
  // Only a's second turn hits: its 192-token context is 3 full blocks.
  EXPECT_EQ(st.hit_tokens, 192u);
  EXPECT_DOUBLE_EQ(st.ideal_hit_ratio, 192.0 / 484.0);
  EXPECT_EQ(st.prompt_blocks, 2u + 4u + 2u);
  EXPECT_EQ(st.hit_blocks, 3u);
  EXPECT_DOUBLE_EQ(st.session_hit_ratio_mean, (192.0 / 384.0 + 0.0) / 2);
}

TEST(StatsTest, HashIdsHitAcrossSessionsInArrivalOrder) {
  Workload w;
  // Three one-turn open-loop sessions, 4-token blocks. Listed out of arrival order on purpose.
  auto make = [](uint64_t id, double t, std::vector<uint64_t> ids) {
    Session s;
    s.id = id;
    s.block_size = 4;
    s.turns = {Turn{.append_tokens = 4 * ids.size(),
                    .gen_tokens = 1,
                    .arrival_s = t,
                    .hash_ids = std::move(ids)}};
    return s;
  };
  w.sessions = {make(0, 2.0, {1, 2, 9}), make(1, 1.0, {1, 2, 3}), make(2, 3.0, {1, 5, 2})};
  const WorkloadStats st = ComputeStats(w, 64);
  // t=1: {1,2,3} all miss; t=2: {1,2} hit, 9 misses; t=3: 1 hits, then 5 breaks the prefix.
  EXPECT_EQ(st.hit_blocks, 3u);
  EXPECT_EQ(st.hit_tokens, 12u);
  EXPECT_EQ(st.prompt_blocks, 9u);
  EXPECT_DOUBLE_EQ(st.ideal_block_hit_ratio, 3.0 / 9.0);
}

TEST(StatsTest, EmptyWorkloadIsAllZero) {
  const WorkloadStats st = ComputeStats(Workload{}, 64);
  EXPECT_EQ(st.sessions, 0u);
  EXPECT_EQ(st.turns, 0u);
  EXPECT_EQ(st.ideal_hit_ratio, 0.0);
}

}  // namespace
}  // namespace dualpath::trace
