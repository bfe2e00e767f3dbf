#include "dualpath/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "sim/uniform.h"

namespace dualpath::sim {
namespace {

kv::ModelGeometry Model() { return *kv::FindModel("ds660b"); }

// A generator that returns one fixed value, to feed the standard distribution chosen bits.
struct FixedBits {
  using result_type = uint64_t;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<uint64_t>::max(); }
  result_type operator()() { return bits; }
  uint64_t bits;
};

// The fetch ticks' jitter (UniformFromBits) is the standard uniform distribution's value for the
// same draw: on a long stream of mt19937_64 draws and at the edges (0, the smallest step, the
// draws that round to 2^64 and must stay below 1). A change of either side's algorithm fails it.
TEST(SimulatorTest, JitterMatchesTheStandardDistribution) {
  for (uint64_t seed : {uint64_t{1}, uint64_t{0x9e3779b97f4a7c15ULL}}) {
    std::mt19937_64 a(seed), b(seed);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    for (int i = 0; i < 200'000; ++i) ASSERT_EQ(uni(a), UniformFromBits(b())) << "draw " << i;
  }
  const uint64_t top = std::numeric_limits<uint64_t>::max();
  for (uint64_t bits : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 11, uint64_t{1} << 63, top - 1024,
                        top - 1023, top - 1, top}) {
    FixedBits g{bits};
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    const double want = uni(g);
    EXPECT_EQ(want, UniformFromBits(bits)) << bits;
    EXPECT_LT(UniformFromBits(bits), 1.0) << bits;
  }
  EXPECT_EQ(UniformFromBits(top), std::nextafter(1.0, 0.0));
}

// The tests run DS 660B on clusters of 1-3 nodes, where its FP8 weights would not fit (672 GB
// over one node's 8 GPUs); pin the engine constants ResolveEngine derives for 2P4D so these
// small clusters stand in for slices of a real one.
SimConfig Pinned() {
  SimConfig c;
  c.engine.decode_weight_gb = 21;
  c.engine.de_hbm_reserved_gb = 38;
  c.engine.pe_hbm_reserved_gb = 48;
  c.engine.decode_overhead_ms = 29;
  return c;
}

SimWorkload Synthetic(uint32_t agents, uint64_t seed = 7) {
  trace::SyntheticSpec spec;
  spec.max_len_k = 16;
  spec.sessions = agents;
  spec.seed = seed;
  return *CompactWorkload(*trace::GenerateSynthetic(spec), 64);
}

SimResult RunSystem(SystemKind system, const SimWorkload& w, ClusterShape shape = {1, 2},
                    SimConfig config = Pinned()) {
  RunSpec spec;
  spec.system = system;
  spec.shape = shape;
  auto r = Simulate(config, Model(), w, spec);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : SimResult{};
}

double PrefillNodeBytes(const SimResult& r, bool prefill) {
  double total = 0;
  for (size_t n = 0; n < r.snic_util.size(); ++n) {
    if (r.node_is_prefill[n] == prefill) {
      total += std::accumulate(r.snic_util[n].begin(), r.snic_util[n].end(), 0.0);
    }
  }
  return total;
}

TEST(SimulatorTest, EveryRequestCompletes) {
  const SimWorkload w = Synthetic(24);
  for (SystemKind k : {SystemKind::kBasic, SystemKind::kLayerwise, SystemKind::kDualPathRr,
                       SystemKind::kDualPath, SystemKind::kOracle, SystemKind::kDualPathSplit}) {
    const SimResult r = RunSystem(k, w);
    EXPECT_EQ(r.requests, w.turns.size()) << SystemName(k);
    EXPECT_EQ(r.too_long.requests, 0u) << SystemName(k);
    EXPECT_EQ(r.agents, w.agents.size());
    EXPECT_GT(r.jct_s, 0);
    EXPECT_GT(r.mean_agent_jct_s, 0);
    EXPECT_LE(r.mean_agent_jct_s, r.jct_s);
  }
}

// Two prefill nodes with identical engines must share Basic's reads about equally. Fetch timers
// restarted with a fixed stagger by group index let prefill group 0 fetch first after every
// idle spell and take the head of each burst (its node read ~1.2x the other's).
TEST(SimulatorTest, PrefillNodesShareReadsEvenly) {
  const SimWorkload w = Synthetic(48);
  const SimResult r = RunSystem(SystemKind::kBasic, w, {2, 1});
  ASSERT_EQ(r.snic_util.size(), 3u);
  const double a = std::accumulate(r.snic_util[0].begin(), r.snic_util[0].end(), 0.0);
  const double b = std::accumulate(r.snic_util[1].begin(), r.snic_util[1].end(), 0.0);
  ASSERT_GT(a + b, 0);
  EXPECT_LT(std::max(a, b) / std::min(a, b), 1.1) << a << " vs " << b;
}

// Routing (RunSpec::routing): 2 prefill nodes of 8 PEs each, PEs 0-7 on node 0. Under Basic
// (every read on the PE's node), sticky routing of agents 0-7 keeps all their turns, and so all
// reads, on node 0; round-robin moves each agent's later turns on to node 1 (turn k of agent a on
// PE (a + k) mod 16); the dualpath choice spreads them too. Every request completes either way.
TEST(SimulatorTest, RoutingFixesEachTurnsPrefillEngine) {
  const SimWorkload w = Synthetic(8);
  const auto node_reads = [&](sched::Routing routing) {
    RunSpec spec;
    spec.system = SystemKind::kBasic;
    spec.shape = {2, 1};
    spec.routing = routing;
    auto r = Simulate(Pinned(), Model(), w, spec);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return std::pair<double, double>{0, 0};
    EXPECT_EQ(r->requests, w.turns.size()) << sched::RoutingName(routing);
    return std::pair<double, double>{
        std::accumulate(r->snic_util[0].begin(), r->snic_util[0].end(), 0.0),
        std::accumulate(r->snic_util[1].begin(), r->snic_util[1].end(), 0.0)};
  };
  const auto sticky = node_reads(sched::Routing::kSticky);
  EXPECT_GT(sticky.first, 0);
  EXPECT_EQ(sticky.second, 0);
  const auto rr = node_reads(sched::Routing::kRoundRobin);
  EXPECT_GT(rr.first, 0);
  EXPECT_GT(rr.second, 0);
  const auto dual = node_reads(sched::Routing::kDualPath);
  EXPECT_GT(dual.first, 0);
  EXPECT_GT(dual.second, 0);
}

TEST(SimulatorTest, ReadPathsFollowTheSystem) {
  const SimWorkload w = Synthetic(24);
  const SimResult basic = RunSystem(SystemKind::kBasic, w);
  EXPECT_GT(PrefillNodeBytes(basic, true), 0);
  EXPECT_EQ(PrefillNodeBytes(basic, false), 0);  // PE read path only
  const SimResult dual = RunSystem(SystemKind::kDualPath, w);
  EXPECT_GT(PrefillNodeBytes(dual, false), 0);  // decode-side NICs carry reads
  const SimResult rr = RunSystem(SystemKind::kDualPathRr, w);
  EXPECT_GT(PrefillNodeBytes(rr, true), 0);
  EXPECT_GT(PrefillNodeBytes(rr, false), 0);
  const SimResult oracle = RunSystem(SystemKind::kOracle, w);
  EXPECT_EQ(oracle.snic_read_bytes, 0);
  // Everyone else reads the same hit bytes, just on different NICs.
  EXPECT_NEAR(dual.snic_read_bytes, basic.snic_read_bytes, 1e-6 * basic.snic_read_bytes);
}

TEST(SimulatorTest, StorageBoundClusterOrdersTheSystems) {
  // A slow storage NIC makes loading the bottleneck: using every node's NIC must help, and no
  // system can beat one that does no I/O.
  SimConfig c = Pinned();
  c.hw.snic_gbps = 25;
  const SimWorkload w = Synthetic(96);
  const double basic = RunSystem(SystemKind::kBasic, w, {1, 2}, c).jct_s;
  const double dual = RunSystem(SystemKind::kDualPath, w, {1, 2}, c).jct_s;
  const double oracle = RunSystem(SystemKind::kOracle, w, {1, 2}, c).jct_s;
  EXPECT_LT(dual, 0.8 * basic);
  EXPECT_LE(oracle, dual);
}

// The last agent to finish is the offline JCT's critical path: its finish is the JCT, its turns
// and generated tokens are its trajectory's, and (no think time in synthetic trajectories) its
// time splits exactly into time to first tokens and decoding.
TEST(SimulatorTest, LastAgentIsTheCriticalPath) {
  const SimWorkload w = Synthetic(24);
  for (SystemKind k : {SystemKind::kBasic, SystemKind::kDualPath, SystemKind::kOracle}) {
    const SimResult r = RunSystem(k, w);
    const AgentPath& p = r.last_agent;
    ASSERT_LT(p.agent, w.agents.size()) << SystemName(k);
    const SimAgent& a = w.agents[p.agent];
    uint64_t gen = 0;
    for (uint32_t t = a.first_turn; t < a.first_turn + a.num_turns; ++t) gen += w.turns[t].gen;
    EXPECT_EQ(p.turns, a.num_turns) << SystemName(k);
    EXPECT_EQ(p.generated_tokens, gen) << SystemName(k);
    EXPECT_DOUBLE_EQ(p.finish_s, r.jct_s) << SystemName(k);
    EXPECT_GT(p.to_first_token_s, 0) << SystemName(k);
    EXPECT_GT(p.decode_s, 0) << SystemName(k);
    EXPECT_NEAR(p.start_s + p.to_first_token_s + p.decode_s, p.finish_s, 1e-6 * p.finish_s)
        << SystemName(k);
  }
}

// The decode series: one agent can never put more than one request per window into decode, so
// the batch per decode GPU is at most 1 / (decode GPUs); every window that decoded steps at least
// the fixed decode overhead; and the time-integral of the batch equals the decode time of the
// agent's turns (each turn decodes alone, from joining to its last token).
TEST(SimulatorTest, DecodeSeriesFollowsTheRequests) {
  SimWorkload one = Synthetic(1);
  for (SystemKind k : {SystemKind::kBasic, SystemKind::kOracle}) {
    const SimResult r = RunSystem(k, one);
    const double de_gpus = 2 * 8;  // RunSystem's default 1P2D, 8 GPUs per node
    ASSERT_FALSE(r.decode_batch_per_gpu.empty()) << SystemName(k);
    ASSERT_EQ(r.decode_batch_per_gpu.size(), r.decode_step_ms.size());
    double integral = 0;
    bool decoded = false;
    for (size_t w = 0; w < r.decode_batch_per_gpu.size(); ++w) {
      const double b = r.decode_batch_per_gpu[w];
      EXPECT_LE(b, 1.0 / de_gpus + 1e-6) << SystemName(k) << " window " << w;
      if (b > 0) {
        decoded = true;
        EXPECT_GE(r.decode_step_ms[w], Pinned().engine.decode_overhead_ms - 1e-3) << w;
      }
      integral += b * de_gpus * SimConfig{}.snic_window_s;
    }
    EXPECT_TRUE(decoded) << SystemName(k);
    // decode_s also holds the prompt KV's way to the DE, except for Oracle, which moves no KV.
    EXPECT_LE(integral, r.last_agent.decode_s * (1 + 1e-6)) << SystemName(k);
    if (k == SystemKind::kOracle) {
      EXPECT_NEAR(integral, r.last_agent.decode_s, 1e-6 * r.last_agent.decode_s);
    }
  }
}

TEST(SimulatorTest, SameInputSameResult) {
  const SimWorkload w = Synthetic(32);
  RunSpec spec;
  spec.shape = {1, 1};
  spec.online = true;
  spec.aps = 0.5;
  spec.seed = 3;
  auto a = Simulate(Pinned(), Model(), w, spec);
  auto b = Simulate(Pinned(), Model(), w, spec);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->jct_s, b->jct_s);
  EXPECT_EQ(a->ttft_p99_s, b->ttft_p99_s);
  EXPECT_EQ(a->tpot_mean_s, b->tpot_mean_s);
  EXPECT_EQ(a->events, b->events);
  spec.seed = 4;  // different arrival times
  auto c = Simulate(Pinned(), Model(), w, spec);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->jct_s, c->jct_s);
}

// Offline start skew: a single agent starts inside [0, S] (S = offline_start_skew_s), the same
// for the same seed, and a skewed batch finishes no earlier than its last start; S = 0 is the
// paper's simultaneous start. The prefill busy fraction is a fraction.
TEST(SimulatorTest, StartSkewStaggersFirstTurnsDeterministically) {
  const SimWorkload one = Synthetic(1);
  SimConfig skewed = Pinned();
  skewed.offline_start_skew_s = 500;
  const SimResult a = RunSystem(SystemKind::kDualPath, one, {1, 2}, skewed);
  const SimResult b = RunSystem(SystemKind::kDualPath, one, {1, 2}, skewed);
  const SimResult flat = RunSystem(SystemKind::kDualPath, one);
  EXPECT_EQ(flat.last_agent.start_s, 0.0);
  EXPECT_GT(a.last_agent.start_s, 0.0);
  EXPECT_LE(a.last_agent.start_s, 500.0);
  EXPECT_EQ(a.last_agent.start_s, b.last_agent.start_s);
  EXPECT_EQ(a.jct_s, b.jct_s);
  // One agent alone: the same turns, shifted by its start.
  EXPECT_NEAR(a.jct_s - a.last_agent.start_s, flat.jct_s, 1e-6 * flat.jct_s);

  const SimWorkload w = Synthetic(24);
  const SimResult s = RunSystem(SystemKind::kDualPath, w, {1, 2}, skewed);
  const SimResult f = RunSystem(SystemKind::kDualPath, w);
  EXPECT_NE(s.jct_s, f.jct_s);
  EXPECT_GT(f.prefill_busy_fraction, 0.0);
  EXPECT_LE(f.prefill_busy_fraction, 1.0 + 1e-9);
}

TEST(SimulatorTest, OnlineReportsLatencies) {
  const SimWorkload w = Synthetic(32);
  RunSpec spec;
  spec.shape = {1, 1};
  spec.online = true;
  spec.aps = 0.2;
  auto r = Simulate(Pinned(), Model(), w, spec);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->ttft_p50_s, 0);
  EXPECT_GE(r->ttft_p99_s, r->ttft_p50_s);
  EXPECT_GT(r->ttst_mean_s, 0);
  // TPOT is at least one decode step's fixed overhead.
  EXPECT_GE(r->tpot_mean_s, Pinned().engine.decode_overhead_ms * 1e-3);
}

TEST(SimulatorTest, OnlineAgentsBeyondTheWorkloadReuseSessions) {
  const SimWorkload w = Synthetic(8);
  RunSpec spec;
  spec.shape = {1, 1};
  spec.online = true;
  spec.aps = 1;
  spec.online_agents = 20;
  auto r = Simulate(Pinned(), Model(), w, spec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->agents, 20u);
}

// Issue 25 item 10: real traces hold prompts no engine can hold (WEKA's Claude Code sessions reach
// 838K tokens; Basic's PE holds ~333K in HBM). Such a request used to stop the run (Basic:
// "PackBatch: queue[0] has 332571 cached tokens, more than max_batch_kv_tokens 332571 allows";
// over the decode HBM: "simulation stalled"). Now it is refused on arrival and counted by side,
// every other request is served, and the agent's session goes on with its next turn.
TEST(SimulatorTest, RequestsNoEngineCanHoldAreRefusedAndTheRunGoesOn) {
  const SimConfig c = Pinned();
  const double kvb = static_cast<double>(Model().KvBytesPerToken());
  const auto pe_cap = static_cast<int64_t>((c.hw.hbm_gb - c.engine.pe_hbm_reserved_gb) * 1e9 / kvb);
  const auto de_cap = static_cast<int64_t>((c.hw.hbm_gb - c.engine.de_hbm_reserved_gb) * 1e9 / kvb);
  ASSERT_LT(pe_cap + 100'000, de_cap);
  SimWorkload w;
  auto turn = [](int64_t hit, int64_t prompt, int64_t gen) {
    return SimTurn{static_cast<uint32_t>(hit), static_cast<uint32_t>(prompt),
                   static_cast<uint32_t>(gen), 0.5f, -1};
  };
  // Agent 0: a prompt of exactly one PE's KV (fits: it must not stall), one over it (Basic cannot
  // prefill it), one whose prompt + generation exceeds a DE's (nobody can decode it), then a
  // normal turn.
  w.turns = {turn(0, 2'000, 40),     turn(1'984, pe_cap, 30), turn(0, pe_cap + 50'000, 20),
             turn(0, 1'000, de_cap), turn(0, 3'000, 40),      turn(0, 1'000, 30),
             turn(960, 1'500, 30)};
  w.agents = {SimAgent{0, 0, 5}, SimAgent{0, 5, 2}};
  const uint64_t total = w.turns.size();
  const SimResult basic = RunSystem(SystemKind::kBasic, w);
  EXPECT_EQ(basic.too_long.requests, 2u);
  EXPECT_EQ(basic.too_long.prefill, 1u);
  EXPECT_EQ(basic.too_long.decode, 1u);
  EXPECT_EQ(basic.too_long.prefill_capacity_tokens, pe_cap);
  EXPECT_EQ(basic.too_long.decode_capacity_tokens, de_cap);
  EXPECT_EQ(basic.requests, total - 2);
  EXPECT_EQ(basic.agents, 2u);  // agent 0 went on to its last turn
  EXPECT_EQ(basic.last_agent.agent, 0u);
  EXPECT_GT(basic.jct_s, 0);
  // Layerwise prefill holds one layer at a time: no prefill limit, only the decode one.
  for (SystemKind k : {SystemKind::kDualPath, SystemKind::kOracle}) {
    const SimResult r = RunSystem(k, w);
    EXPECT_EQ(r.too_long.requests, 1u) << SystemName(k);
    EXPECT_EQ(r.too_long.prefill, 0u) << SystemName(k);
    EXPECT_EQ(r.too_long.decode, 1u) << SystemName(k);
    EXPECT_EQ(r.too_long.prefill_capacity_tokens, 0) << SystemName(k);
    EXPECT_EQ(r.requests, total - 1) << SystemName(k);
    EXPECT_EQ(r.agents, 2u) << SystemName(k);
  }
}

// A cluster whose DEs hold almost nothing refuses every request instead of hanging.
TEST(SimulatorTest, RequestThatFitsNoDecodeEngineIsCountedNotHung) {
  SimConfig c = Pinned();
  c.engine.de_hbm_reserved_gb = c.hw.hbm_gb - 0.01;  // 10 MB of KV per DE: 249 tokens
  const SimWorkload w = Synthetic(2);
  auto r = Simulate(c, Model(), w, RunSpec{.shape = {1, 1}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->too_long.requests, w.turns.size());
  EXPECT_EQ(r->too_long.decode, w.turns.size());
  EXPECT_EQ(r->too_long.decode_capacity_tokens, 249);
  EXPECT_EQ(r->requests, 0u);
}

TEST(SimulatorTest, BadSpecsAreRejected) {
  RunSpec spec;
  spec.online = true;
  spec.aps = 0;
  EXPECT_FALSE(Simulate(Pinned(), Model(), Synthetic(2), spec).ok());
  EXPECT_FALSE(Simulate(Pinned(), Model(), SimWorkload{}, RunSpec{}).ok());
}

}  // namespace
}  // namespace dualpath::sim
