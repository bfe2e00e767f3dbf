#include "dualpath/sim/quad_heap.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <random>
#include <vector>

namespace dualpath::sim {
namespace {

// A decode completion's key as the simulator orders it: (step, slot), slots unique.
struct Entry {
  double step;
  uint32_t slot;
};
struct EntryOrder {
  static bool Earlier(const Entry& x, const Entry& y) {
    return x.step < y.step || (x.step == y.step && x.slot < y.slot);
  }
  static size_t EarlierBit(const Entry& x, const Entry& y) {
    return static_cast<size_t>(x.step < y.step) |
           (static_cast<size_t>(x.step == y.step) & static_cast<size_t>(x.slot < y.slot));
  }
};
// std::priority_queue's comparator (a max-heap of "later"), what the decode groups used before.
struct Later {
  bool operator()(const Entry& x, const Entry& y) const {
    return x.step > y.step || (x.step == y.step && x.slot > y.slot);
  }
};

// QuadHeap against std::priority_queue (issue 27) on random interleavings of pushes and pops with
// many equal steps (integer steps, as decode completions have): every pop returns the same entry.
// The simulator's JSON is byte-identical only if it does. Sizes from 0 to a few thousand, so the
// partial last level (fewer than four children) is exercised too.
TEST(QuadHeapTest, PopsTheSameSequenceAsStdPriorityQueue) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    QuadHeap<Entry, EntryOrder> q;
    std::priority_queue<Entry, std::vector<Entry>, Later> ref;
    std::vector<uint32_t> free_slots;
    uint32_t next_slot = 0;
    uint64_t pops = 0;
    double floor = 0;  // steps only grow past the last popped one, as decode steps do
    for (int step = 0; step < 30'000; ++step) {
      const bool push = q.empty() || rng() % 100 < (step < 15'000 ? 60u : 40u);
      if (push) {
        uint32_t slot;
        if (!free_slots.empty() && rng() % 2 == 0) {
          slot = free_slots.back();  // reused slots, as the simulator's free list gives
          free_slots.pop_back();
        } else {
          slot = next_slot++;
        }
        const Entry e{floor + static_cast<double>(rng() % 64), slot};
        q.push(e);
        ref.push(e);
      } else {
        const Entry x = q.top();
        const Entry y = ref.top();
        ASSERT_EQ(x.slot, y.slot) << "seed " << seed << " pop " << pops;
        ASSERT_EQ(x.step, y.step);
        q.pop();
        ref.pop();
        floor = x.step;
        free_slots.push_back(x.slot);
        ++pops;
      }
      ASSERT_EQ(q.size(), ref.size());
    }
    while (!q.empty()) {
      ASSERT_EQ(q.top().slot, ref.top().slot);
      q.pop();
      ref.pop();
    }
    EXPECT_TRUE(ref.empty());
    EXPECT_GT(pops, 10'000u);
  }
}

TEST(QuadHeapTest, SmallSizes) {
  QuadHeap<Entry, EntryOrder> q;
  EXPECT_TRUE(q.empty());
  q.push({3, 0});
  q.push({1, 1});
  q.push({2, 2});
  q.push({1, 0});  // equal step: the lower slot first
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q.top().slot, 0u);
  EXPECT_EQ(q.top().step, 1);
  q.pop();
  EXPECT_EQ(q.top().slot, 1u);
  q.pop();
  EXPECT_EQ(q.top().step, 2);
  q.pop();
  EXPECT_EQ(q.top().step, 3);
  q.pop();
  EXPECT_TRUE(q.empty());
}

// NonNegativeKey orders as (value, tie) lexicographically for every non-negative double: random
// values of every magnitude (and subnormals, zero, infinity), ties on equal values.
TEST(QuadHeapTest, NonNegativeKeyOrdersLikeValueThenTie) {
  std::mt19937_64 rng(27);
  std::vector<double> values = {0.0, 5e-324, 1e-300, 1.0,
                                1.5, 2.0,    1e300,  std::numeric_limits<double>::infinity()};
  for (int i = 0; i < 200; ++i) {
    values.push_back(
        std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 200) - 150));
  }
  for (double x : values) {
    for (double y : values) {
      for (uint64_t tx : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
        for (uint64_t ty : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
          const bool want = x < y || (x == y && tx < ty);
          ASSERT_EQ(NonNegativeKey(x, tx) < NonNegativeKey(y, ty), want) << x << " " << y;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dualpath::sim
