// Randomized (seeded, deterministic) invariants of the scheduler over many fetches: decisions only
// go to eligible engines of the fetching group, reads add up, every request is placed exactly
// once, and the same inputs give the same decisions; and a prefill fetch reading decode-node
// queues from a live NodeReadQueueSource decides exactly as one after ApplyNodeReadQueue of every
// decode node (what the simulator did before issue 27).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "dualpath/sched/scheduler.h"
#include "sched/scheduler_test_util.h"

namespace dualpath::sched {
namespace {

struct Trace {
  std::vector<std::tuple<uint64_t, uint32_t>> decode;  // (request, DE)
  std::vector<std::tuple<uint64_t, uint32_t, uint32_t, int64_t, int64_t>> prefill;
};

Trace RunRandom(const SchedConfig& base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const ClusterDesc cluster =
      MakeUniformCluster(
          {.prefill_nodes = 3, .decode_nodes = 4, .gpus_per_node = 4, .nodes_per_decode_group = 2})
          .value();
  SchedConfig config = base;
  config.short_read_queue_tokens = 50'000;
  config.unfinished_token_limit = 120'000;
  auto sched = testing::MakeScheduler(cluster, config);
  Trace trace;
  std::map<uint64_t, int64_t> hit_of, need_of, prompt_of;
  std::map<uint64_t, int> placed_decode, placed_prefill;
  uint64_t next_id = 0;
  const int groups = cluster.num_groups();

  for (int round = 0; round < 300; ++round) {
    const int arrivals = round < 250 ? static_cast<int>(rng() % 6) : 0;
    for (int i = 0; i < arrivals; ++i) {
      const int64_t hit = static_cast<int64_t>(rng() % 60'000);
      SchedRequest r = testing::Req(next_id, hit + 1 + static_cast<int64_t>(rng() % 2000), hit,
                                    static_cast<int64_t>(rng() % 500));
      hit_of[next_id] = hit;
      need_of[next_id] = r.decode_tokens();
      prompt_of[next_id] = r.prompt_tokens;
      EXPECT_TRUE(sched->Submit(r).ok());
      ++next_id;
    }
    const uint32_t g = static_cast<uint32_t>(rng() % static_cast<uint64_t>(groups));
    // Random reports for the group's engines (the scheduler's view is reset to them).
    std::vector<EngineReport> reports;
    std::map<uint32_t, EngineReport> start;
    for (const EngineDesc& e : cluster.engines) {
      if (e.group.value() != g) continue;
      const bool light = rng() % 3 != 0;
      EngineReport rep = testing::Report(e.id.value(), static_cast<int64_t>(rng() % 5),
                                         light ? static_cast<int64_t>(rng() % 100'000) : 200'000,
                                         static_cast<int64_t>(rng() % 120'000),
                                         static_cast<int64_t>(rng() % 150'000));
      reports.push_back(rep);
      start[e.id.value()] = rep;
    }
    FetchResult out;
    EXPECT_TRUE(sched->FetchForGroup(GroupId(g), reports, &out).ok());
    for (const DecodeAssignment& d : out.decode) {
      const EngineDesc& e = cluster.engines[d.decode.value()];
      EXPECT_EQ(e.group.value(), g);
      EXPECT_EQ(e.role, Role::kDecode);
      // Enough HBM at decision time (report minus earlier placements of this fetch).
      EngineReport& s = start[d.decode.value()];
      EXPECT_GE(s.hbm_free_tokens, need_of[d.request.value()]);
      s.hbm_free_tokens -= need_of[d.request.value()];
      EXPECT_EQ(++placed_decode[d.request.value()], 1);
      trace.decode.emplace_back(d.request.value(), d.decode.value());
    }
    for (const Assignment& a : out.prefill) {
      const EngineDesc& e = cluster.engines[a.prefill.value()];
      EXPECT_EQ(e.group.value(), g);
      EXPECT_EQ(e.role, Role::kPrefill);
      // Not overloaded at decision time.
      EngineReport& s = start[a.prefill.value()];
      EXPECT_LE(s.unfinished_tokens, config.unfinished_token_limit);
      s.unfinished_tokens += prompt_of[a.request.value()];
      EXPECT_EQ(placed_decode[a.request.value()], 1);  // DE first
      EXPECT_EQ(++placed_prefill[a.request.value()], 1);
      EXPECT_EQ(a.prefill_read_tokens + a.decode_read_tokens, hit_of[a.request.value()]);
      switch (a.side) {
        case ReadSide::kPrefill:
          EXPECT_EQ(a.decode_read_tokens, 0);
          break;
        case ReadSide::kDecode:
          EXPECT_EQ(a.prefill_read_tokens, 0);
          break;
        case ReadSide::kSplit:
          EXPECT_TRUE(config.split_reads);
          EXPECT_GT(a.prefill_read_tokens, 0);
          EXPECT_GT(a.decode_read_tokens, 0);
          EXPECT_EQ(a.prefill_read_tokens % config.block_tokens, 0);
          break;
      }
      if (config.read_side == ReadSidePolicy::kPrefillOnly) {
        EXPECT_EQ(a.decode_read_tokens, 0);
      }
      trace.prefill.emplace_back(a.request.value(), a.prefill.value(), a.decode.value(),
                                 a.prefill_read_tokens, a.decode_read_tokens);
    }
  }
  // Drain: every group fetches with idle reports until everything is placed.
  for (int pass = 0; pass < 4 && sched->pending() > 0; ++pass) {
    for (int role = 0; role < 2; ++role) {
      for (uint32_t g = 0; g < static_cast<uint32_t>(groups); ++g) {
        if ((sched->group_role(GroupId(g)) == Role::kDecode) != (role == 0)) continue;
        std::vector<EngineReport> idle;
        for (const EngineDesc& e : cluster.engines) {
          if (e.group.value() == g) idle.push_back(testing::Report(e.id.value(), 0, 0, 0, 1 << 30));
        }
        FetchResult out;
        EXPECT_TRUE(sched->FetchForGroup(GroupId(g), idle, &out).ok());
        for (const auto& d : out.decode) EXPECT_EQ(++placed_decode[d.request.value()], 1);
        for (const auto& a : out.prefill) EXPECT_EQ(++placed_prefill[a.request.value()], 1);
      }
    }
  }
  EXPECT_EQ(sched->pending(), 0);
  EXPECT_EQ(placed_prefill.size(), next_id);
  EXPECT_EQ(sched->stats().submitted, static_cast<int64_t>(next_id));
  return trace;
}

TEST(SchedulerPropertyTest, InvariantsHoldForEveryPolicy) {
  SchedConfig split = SchedConfig::DualPath();
  split.split_reads = true;
  SchedConfig rr_engines = SchedConfig::DualPath();
  rr_engines.engine_policy = EnginePolicy::kRoundRobin;
  for (const SchedConfig& c : {SchedConfig::DualPath(), SchedConfig::Basic(),
                               SchedConfig::DualPathRoundRobinSide(), split, rr_engines}) {
    SCOPED_TRACE(std::string(ReadSidePolicyName(c.read_side)) + " " +
                 std::string(EnginePolicyName(c.engine_policy)) + (c.split_reads ? " split" : ""));
    const Trace t = RunRandom(c, 2026);
    EXPECT_GT(t.prefill.size(), 100u);  // the run did real work
    int64_t splits = 0, decode_side = 0;
    for (const auto& [id, pe, de, pe_tokens, de_tokens] : t.prefill) {
      splits += pe_tokens > 0 && de_tokens > 0;
      decode_side += de_tokens > 0;
    }
    EXPECT_EQ(splits > 0, c.split_reads);  // the split rule was exercised when enabled
    EXPECT_EQ(decode_side > 0, c.read_side != ReadSidePolicy::kPrefillOnly);
  }
}

TEST(SchedulerPropertyTest, SameInputsGiveSameDecisions) {
  const Trace a = RunRandom(SchedConfig::DualPath(), 7);
  const Trace b = RunRandom(SchedConfig::DualPath(), 7);
  EXPECT_EQ(a.decode, b.decode);
  EXPECT_EQ(a.prefill, b.prefill);
  const Trace c = RunRandom(SchedConfig::DualPath(), 8);
  EXPECT_NE(a.prefill, c.prefill);  // and the seed matters
}

// A NodeReadQueueSource over a table of queues, counting reads per node.
class TableQueues final : public NodeReadQueueSource {
 public:
  explicit TableQueues(const std::vector<int64_t>& q) : q_(q), reads_(q.size(), 0) {}
  int64_t ReadQueueTokens(NodeId node) const override {
    ++reads_[node.value()];
    return q_[node.value()];
  }
  const std::vector<int>& reads() const { return reads_; }

 private:
  const std::vector<int64_t>& q_;
  mutable std::vector<int> reads_;
};

// Two schedulers see the same submissions, reports and decode-node queues: `eager` gets every
// decode node's queue by ApplyNodeReadQueue before each prefill fetch, `live` reads them from a
// NodeReadQueueSource. Every decision (and every counter) must match.
void CheckLiveQueuesMatchEager(const SchedConfig& base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr uint32_t kPrefillNodes = 3, kDecodeNodes = 5;
  const ClusterDesc cluster =
      MakeUniformCluster(
          {.prefill_nodes = kPrefillNodes, .decode_nodes = kDecodeNodes, .gpus_per_node = 4})
          .value();
  SchedConfig config = base;
  config.short_read_queue_tokens = 40'000;
  config.unfinished_token_limit = 150'000;
  auto eager = testing::MakeScheduler(cluster, config);
  auto live = testing::MakeScheduler(cluster, config);
  const int groups = cluster.num_groups();
  const uint32_t nodes = kPrefillNodes + kDecodeNodes;
  std::vector<int64_t> queues(nodes, 0);
  uint64_t next_id = 0;
  int64_t placed = 0, live_reads = 0, eager_writes = 0;
  for (int round = 0; round < 600; ++round) {
    for (int i = static_cast<int>(rng() % 5); i > 0; --i) {
      const int64_t hit = static_cast<int64_t>(rng() % 80'000);
      SchedRequest r = testing::Req(next_id, hit + 1 + static_cast<int64_t>(rng() % 3000), hit,
                                    static_cast<int64_t>(rng() % 400));
      if (rng() % 8 == 0) {  // a routed request: fixed PE
        r.prefill_engine = EngineId(static_cast<uint32_t>(rng() % (kPrefillNodes * 4)));
      }
      ASSERT_TRUE(eager->Submit(r).ok());
      ASSERT_TRUE(live->Submit(r).ok());
      ++next_id;
    }
    // The decode nodes' storage NICs drain and fill between fetches.
    for (uint32_t n = kPrefillNodes; n < nodes; ++n) {
      queues[n] = rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 120'000);
    }
    const auto g = static_cast<uint32_t>(rng() % static_cast<uint64_t>(groups));
    std::vector<EngineReport> reports;
    for (const EngineDesc& e : cluster.engines) {
      if (e.group.value() != g) continue;
      reports.push_back(testing::Report(
          e.id.value(), static_cast<int64_t>(rng() % 5), static_cast<int64_t>(rng() % 200'000),
          static_cast<int64_t>(rng() % 100'000), static_cast<int64_t>(rng() % 150'000)));
    }
    FetchResult a, b;
    const bool prefill = eager->group_role(GroupId(g)) == Role::kPrefill;
    if (prefill) {
      for (uint32_t n = kPrefillNodes; n < nodes; ++n) {
        ASSERT_TRUE(eager->ApplyNodeReadQueue(NodeId(n), queues[n]).ok());
        ++eager_writes;
      }
    }
    ASSERT_TRUE(eager->FetchForGroup(GroupId(g), reports, &a).ok());
    const TableQueues source(queues);
    ASSERT_TRUE(live->FetchForGroup(GroupId(g), reports, &b, prefill ? &source : nullptr).ok());
    for (int r : source.reads()) ASSERT_LE(r, 1);  // each node at most once per fetch
    for (int r : source.reads()) live_reads += r;
    ASSERT_EQ(a.decode.size(), b.decode.size()) << "round " << round;
    for (size_t i = 0; i < a.decode.size(); ++i) {
      EXPECT_EQ(a.decode[i].request, b.decode[i].request);
      EXPECT_EQ(a.decode[i].decode, b.decode[i].decode);
    }
    ASSERT_EQ(a.prefill.size(), b.prefill.size()) << "round " << round;
    for (size_t i = 0; i < a.prefill.size(); ++i) {
      EXPECT_EQ(a.prefill[i].request, b.prefill[i].request);
      EXPECT_EQ(a.prefill[i].prefill, b.prefill[i].prefill);
      EXPECT_EQ(a.prefill[i].decode, b.prefill[i].decode);
      EXPECT_EQ(a.prefill[i].side, b.prefill[i].side);
      EXPECT_EQ(a.prefill[i].prefill_read_tokens, b.prefill[i].prefill_read_tokens);
      EXPECT_EQ(a.prefill[i].decode_read_tokens, b.prefill[i].decode_read_tokens);
    }
    placed += static_cast<int64_t>(a.prefill.size());
    // The PE nodes' view (reports + this fetch's reads) is the same in both.
    for (uint32_t n = 0; n < kPrefillNodes; ++n) {
      EXPECT_EQ(eager->NodeReadQueue(NodeId(n)), live->NodeReadQueue(NodeId(n)));
    }
  }
  EXPECT_EQ(eager->stats().read_decode, live->stats().read_decode);
  EXPECT_EQ(eager->stats().read_split, live->stats().read_split);
  EXPECT_EQ(eager->stats().pe_short_queue, live->stats().pe_short_queue);
  EXPECT_EQ(eager->stats().pe_long_queue, live->stats().pe_long_queue);
  EXPECT_GT(placed, 200);                    // the run placed real work
  EXPECT_GT(eager->stats().read_decode, 0);  // and the decode-node queues mattered
  EXPECT_LT(live_reads, eager_writes);       // the live source read fewer nodes than were applied
}

TEST(SchedulerPropertyTest, LiveNodeQueuesDecideLikeAppliedQueues) {
  SchedConfig split = SchedConfig::DualPath();
  split.split_reads = true;
  for (const SchedConfig& c :
       {SchedConfig::DualPath(), split, SchedConfig::DualPathRoundRobinSide()}) {
    SCOPED_TRACE(std::string(ReadSidePolicyName(c.read_side)) + (c.split_reads ? " split" : ""));
    for (uint64_t seed : {1, 2, 3}) CheckLiveQueuesMatchEager(c, seed);
  }
}

}  // namespace
}  // namespace dualpath::sched
