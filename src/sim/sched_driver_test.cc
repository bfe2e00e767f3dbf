// SchedDriver's skipped fetches (issue 27): a driver that skips fetches it proves idle must decide
// exactly as one that calls the scheduler on every fetch. Both drive their own scheduler over one
// simulated cluster on random inputs (arrivals, fetches of random groups, completions on both
// sides); every fetch's decisions are compared field by field.
#include "sim/sched_driver.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace dualpath::sim {
namespace {

struct Placed {
  uint64_t prompt = 0, gen = 0;
  int64_t pe = -1, de = -1;  // ClusterState indices, -1 until placed
  bool prefilled = false;    // the PE finished it: it may complete on its DE
};

ClusterState MakeCluster(uint32_t prefill_nodes, uint32_t decode_nodes, uint32_t gpus) {
  ClusterState c;
  c.prefill_nodes = prefill_nodes;
  c.decode_nodes = decode_nodes;
  c.gpus_per_node = gpus;
  c.kv_bytes_per_token = 1000;
  for (uint32_t n = 0; n < prefill_nodes + decode_nodes; ++n) c.nics.emplace_back(5e7, 1e9, 1.0);
  for (uint32_t n = 0; n < prefill_nodes; ++n) {
    for (uint32_t g = 0; g < gpus; ++g) {
      PeState p;
      p.node = n;
      p.group = n;
      c.pes.push_back(p);
    }
  }
  for (uint32_t n = 0; n < decode_nodes; ++n) {
    for (uint32_t g = 0; g < gpus; ++g) {
      DeState d;
      d.node = c.DeNode(n);
      d.group = n;
      d.hbm_free = 3e8;  // 300K tokens: a few requests each, so HBM runs out and queues form
      c.des.push_back(d);
    }
  }
  return c;
}

void ExpectSameDecisions(const std::vector<sched::DecodeAssignment>& x,
                         const std::vector<sched::DecodeAssignment>& y) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].request, y[i].request);
    EXPECT_EQ(x[i].decode, y[i].decode);
    EXPECT_EQ(x[i].tokens, y[i].tokens);
  }
}

void ExpectSameDecisions(const std::vector<sched::Assignment>& x,
                         const std::vector<sched::Assignment>& y) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].request, y[i].request);
    EXPECT_EQ(x[i].prefill, y[i].prefill);
    EXPECT_EQ(x[i].decode, y[i].decode);
    EXPECT_EQ(x[i].side, y[i].side);
    EXPECT_EQ(x[i].prefill_read_tokens, y[i].prefill_read_tokens);
    EXPECT_EQ(x[i].decode_read_tokens, y[i].decode_read_tokens);
  }
}

// A driver that skips idle and blocked fetches and leaves out the reports of unchanged decode
// engines (issue 27) against one that fetches with every report every time, side by side on
// random arrivals, fetches, prefill ends and completions: the same decisions throughout.
TEST(SchedDriverTest, SkippedIdleFetchesDecideLikeEveryFetch) {
  for (SystemKind system : {SystemKind::kDualPath, SystemKind::kDualPathRr, SystemKind::kBasic}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      std::mt19937_64 rng(seed);
      ClusterState c = MakeCluster(2, 4, 2);
      sched::SchedConfig config = sched::PresetFor(system);
      config.short_read_queue_tokens = 20'000;
      config.unfinished_token_limit = 150'000;
      auto skip = SchedDriver::Create(c, system, config);
      auto every = SchedDriver::Create(c, system, config);
      ASSERT_TRUE(skip.ok() && every.ok());
      (*every)->set_skip_idle_fetches(false);
      const auto num_pes = static_cast<uint32_t>(c.pes.size());
      std::map<uint32_t, Placed> live;  // by slot
      uint32_t next_slot = 0;
      double now = 0;
      uint64_t fetches = 0, placed = 0;
      for (int step = 0; step < 4'000; ++step) {
        now += static_cast<double>(rng() % 4) * 0.005;
        const uint64_t op = rng() % 100;
        if (op < 15) {  // an arrival
          const uint64_t prompt = 1'000 + rng() % 60'000;
          const uint64_t hit = rng() % 2 ? prompt - 1 - rng() % 1'000 : 0;
          const uint64_t gen = 1 + rng() % 2'000;
          const uint32_t slot = next_slot++;
          ASSERT_TRUE((*skip)->Submit(slot, prompt, hit, gen).ok());
          ASSERT_TRUE((*every)->Submit(slot, prompt, hit, gen).ok());
          live[slot] = Placed{prompt, gen};
        } else if (op < 75) {  // a group's fetch
          const auto group = static_cast<uint32_t>(rng() % (*skip)->num_groups());
          sched::FetchResult r1, r2;  // empty: a skipped fetch decides nothing
          if (!(*skip)->SkipIdleFetch(group)) {
            ASSERT_TRUE((*skip)->FetchGroup(group, c, now, &r1).ok());
          }
          ASSERT_TRUE((*every)->FetchGroup(group, c, now, &r2).ok());
          const std::vector<sched::DecodeAssignment>& d1 = r1.decode;
          const std::vector<sched::Assignment>& p1 = r1.prefill;
          ExpectSameDecisions(d1, r2.decode);
          ExpectSameDecisions(p1, r2.prefill);
          ++fetches;
          // The simulation's side of the decisions (simulator.cc Fetch / PlacePrefill).
          for (const sched::DecodeAssignment& a : d1) {
            Placed& r = live[static_cast<uint32_t>(a.request.value())];
            // What the simulator adds to the DE without reading the request (simulator.cc Fetch).
            EXPECT_EQ(static_cast<uint64_t>(a.tokens), r.prompt + r.gen);
            r.de = a.decode.value() - num_pes;
            DeState& de = c.des[static_cast<size_t>(r.de)];
            de.tokens += r.prompt + r.gen;
            de.requests++;
            de.hbm_free -= static_cast<double>(r.prompt + r.gen) * c.kv_bytes_per_token;
          }
          for (const sched::Assignment& a : p1) {
            Placed& r = live[static_cast<uint32_t>(a.request.value())];
            r.pe = a.prefill.value();
            PeState& pe = c.pes[static_cast<size_t>(r.pe)];
            pe.tokens += r.prompt;
            pe.requests++;
            std::vector<StorageNic::Started> started;
            const double kvb = c.kv_bytes_per_token;
            if (a.prefill_read_tokens > 0) {
              c.nics[pe.node].Enqueue(now, a.request.value(),
                                      static_cast<double>(a.prefill_read_tokens) * kvb);
              c.nics[pe.node].Admit(now, &started);
            }
            if (a.decode_read_tokens > 0) {
              const uint32_t node = c.des[static_cast<size_t>(r.de)].node;
              c.nics[node].Enqueue(now, a.request.value(),
                                   static_cast<double>(a.decode_read_tokens) * kvb);
              c.nics[node].Admit(now, &started);
            }
            ++placed;
          }
        } else if (!live.empty()) {  // a prefill finishes, or a request completes
          auto it = live.lower_bound(static_cast<uint32_t>(rng() % next_slot));
          if (it == live.end()) it = live.begin();
          Placed& r = it->second;
          if (r.pe >= 0) {
            PeState& pe = c.pes[static_cast<size_t>(r.pe)];
            pe.tokens -= r.prompt;
            pe.requests--;
            r.pe = -1;
            r.prefilled = true;
          } else if (r.prefilled) {
            DeState& de = c.des[static_cast<size_t>(r.de)];
            de.tokens -= r.prompt + r.gen;
            de.requests--;
            de.hbm_free += static_cast<double>(r.prompt + r.gen) * c.kv_bytes_per_token;
            const auto engine = static_cast<uint32_t>(num_pes + r.de);
            (*skip)->DecodeEngineChanged(engine);
            (*every)->DecodeEngineChanged(engine);
            live.erase(it);
          }
        }
      }
      EXPECT_EQ((*every)->skipped_fetches(), 0u);
      // Decode fetches sent only the reports of engines that changed (the rest would repeat the
      // scheduler's view); the reference sent every report.
      EXPECT_EQ((*every)->unsent_reports(), 0u);
      EXPECT_GT((*skip)->unsent_reports(), 0u) << "seed " << seed;
      // The property is only tested if fetches were both skipped and made, and placed requests.
      EXPECT_GT((*skip)->skipped_fetches(), fetches / 20) << "seed " << seed;
      EXPECT_LT((*skip)->skipped_fetches(), fetches) << "seed " << seed;
      // Decode groups waiting for HBM (the private queue's head fits no DE) were skipped too.
      EXPECT_GT((*skip)->skipped_blocked_fetches(), 0u) << "seed " << seed;
      EXPECT_GT(placed, 200u) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace dualpath::sim
