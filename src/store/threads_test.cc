// Many threads on one MasterState: writers put and commit (or abort), readers get, check and
// unpin, a prober runs Exists, and one thread moves the ManualClock, Ticks, and kills and
// restarts a node. Whatever a reader is handed must be a committed object on a live node with the
// size and checksum its writer committed. Built for the tsan preset (label tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "dualpath/store/master_state.h"
#include "store/test_util.h"

namespace dualpath::store {
namespace {

using testing::MakeKey;

constexpr uint64_t kKeys = 200;
constexpr uint64_t kBlock = 4096;
// Writers commit a size and a checksum that are functions of the key, so any reader can check
// what it is handed.
uint64_t SizeOf(uint64_t i) { return kBlock * (1 + i % 3); }
uint64_t ChecksumOf(uint64_t i) { return i * 31 + 7; }

TEST(MasterThreads, ConcurrentPutsGetsTicksAndNodeDeaths) {
  ManualClock clock(0);
  MasterConfig config;
  config.alignment = kBlock;
  config.put_timeout = 10 * kNanosPerMilli;
  config.pin_ttl = 20 * kNanosPerMilli;
  auto created = MasterState::Create(config, clock);
  ASSERT_TRUE(created.ok());
  MasterState& m = **created;
  // The keys want about 800 blocks (2 blocks, 2 replicas on average) and the 4 nodes hold 640:
  // eviction runs, but most objects fit, so readers get hits.
  for (uint32_t n = 1; n <= 4; ++n) {
    NodeSpec spec;
    spec.id = NodeId(n);
    spec.dram = TierSpec{160 * kBlock, 0.9, 0.7};
    ASSERT_TRUE(m.AddNode(spec).ok());
  }

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, served{0}, wrong{0}, unexpected{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(100 + w);
      while (!stop.load(std::memory_order_relaxed)) {
        ops++;
        const uint64_t i = rng() % kKeys;
        PutOptions opt;
        opt.replicas = 1 + static_cast<int>(rng() % 3);
        opt.preferred_node = NodeId(1 + static_cast<uint32_t>(rng() % 4));
        auto t = m.PutStart(MakeKey(i), SizeOf(i), opt);
        if (!t.ok()) {
          const Code c = t.status().code();
          if (c != Code::kStoreObjectExists && c != Code::kStorePutPending &&
              c != Code::kStoreNotEnoughNodes && c != Code::kStoreNoSpace) {
            unexpected++;
            ADD_FAILURE() << t.status().ToString();
          }
          continue;
        }
        // Commit most, abort some, abandon a few (Tick reclaims them).
        const uint64_t fate = rng() % 100;
        Status s;
        if (fate < 80) {
          s = m.PutCommit(t->id, ChecksumOf(i));
        } else if (fate < 99) {
          s = m.PutAbort(t->id);
        }
        // The put may have expired or lost all its nodes meanwhile: kStoreUnknownPut is fine.
        if (!s.ok() && s.code() != Code::kStoreUnknownPut) {
          unexpected++;
          ADD_FAILURE() << s.ToString();
        }
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(200 + r);
      while (!stop.load(std::memory_order_relaxed)) {
        ops++;
        std::vector<ObjectKey> keys;
        std::vector<uint64_t> ids;
        for (int k = 0; k < 8; ++k) {
          ids.push_back(rng() % kKeys);
          keys.push_back(MakeKey(ids.back()));
        }
        GetResult g = m.Get(keys);
        for (size_t k = 0; k < keys.size(); ++k) {
          const ObjectInfo& o = g.objects[k];
          if (!o.found) continue;
          served++;
          if (o.size != SizeOf(ids[k]) || o.checksum != ChecksumOf(ids[k]) || o.replicas.empty() ||
              o.replicas.size() > 3) {
            wrong++;
          }
          for (const Replica& rep : o.replicas) {
            if (rep.checksum != ChecksumOf(ids[k]) || rep.size != o.size) wrong++;
          }
        }
        if (g.pin && rng() % 4 != 0) {
          // The pin may have expired already; both answers are legal.
          const Status s = m.Unpin(*g.pin);
          if (!s.ok() && s.code() != Code::kStoreUnknownPin) unexpected++;
        }
        (void)m.Remove({keys.data(), rng() % 16 == 0 ? size_t{1} : size_t{0}});
      }
    });
  }
  threads.emplace_back([&] {
    std::vector<ObjectKey> keys;
    for (uint64_t i = 0; i < kKeys; ++i) keys.push_back(MakeKey(i));
    while (!stop.load(std::memory_order_relaxed)) {
      ExistsResult e = m.Exists(keys);
      size_t prefix = 0;
      while (prefix < e.found.size() && e.found[prefix]) prefix++;
      if (prefix != e.prefix_hits) wrong++;
    }
  });

  // The driver: time, Tick, and a node that dies and comes back. Each round waits for the workers
  // to have done 20 more operations, so the rounds interleave with real work however the threads
  // are scheduled; the deadline is only a hang guard.
  const auto hang_guard = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto wait_for_ops = [&](uint64_t n) {
    const uint64_t target = ops.load() + n;
    while (ops.load() < target) {
      if (std::chrono::steady_clock::now() > hang_guard) return false;
      std::this_thread::yield();
    }
    return true;
  };
  std::mt19937_64 rng(7);
  for (int round = 0; round < 400; ++round) {
    ASSERT_TRUE(wait_for_ops(20)) << "workers stalled";
    clock.Advance(kNanosPerMilli * static_cast<Nanos>(1 + rng() % 5));
    (void)m.Tick();
    if (round % 50 == 25) {
      ASSERT_TRUE(m.RemoveNode(NodeId(4)).ok());
    } else if (round % 50 == 40) {
      NodeSpec spec;
      spec.id = NodeId(4);
      spec.dram = TierSpec{160 * kBlock, 0.9, 0.7};
      ASSERT_TRUE(m.AddNode(spec).ok());
    }
    if (round % 100 == 0) {
      const Status s = m.CheckConsistency();
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  stop = true;
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(unexpected.load(), 0u);
  const Status s = m.CheckConsistency();
  EXPECT_TRUE(s.ok()) << s.ToString();
  // After every lease and reservation has run out, nothing is pinned or pending, and the space in
  // use is exactly that of the visible objects.
  clock.Advance(config.put_timeout + config.pin_ttl);
  (void)m.Tick();
  const MasterStats st = m.Stats();
  EXPECT_EQ(st.pins, 0u);
  EXPECT_EQ(st.pending_puts, 0u);
  EXPECT_EQ(st.hidden_pinned, 0u);
  uint64_t used = 0;
  for (NodeId n : m.LiveNodes()) used += m.Usage(n, Tier::kDram)->used;
  uint64_t expect = 0;
  std::vector<ObjectKey> keys;
  for (uint64_t i = 0; i < kKeys; ++i) keys.push_back(MakeKey(i));
  GetResult g = m.Get(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (g.objects[i].found) expect += g.objects[i].size * g.objects[i].replicas.size();
  }
  EXPECT_EQ(used, expect);
  EXPECT_GT(served.load(), 0u) << "objects " << st.objects << " evicted " << st.evicted_replicas
                               << " expired puts " << st.expired_puts << " ops " << ops.load();
  const Status s2 = m.CheckConsistency();
  EXPECT_TRUE(s2.ok()) << s2.ToString();
}

}  // namespace
}  // namespace dualpath::store
