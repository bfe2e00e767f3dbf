#include "dualpath/common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dualpath {
namespace {

TEST(ParallelForTest, CallsEveryIndexExactlyOnce) {
  for (size_t n : {0, 1, 2, 7, 64, 257}) {
    for (size_t threads : {0, 1, 2, 3, 8, 300}) {
      std::vector<std::atomic<int>> calls(n);
      ParallelFor(n, threads, [&](size_t i) { calls[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(calls[i].load(), 1) << "n " << n << " threads " << threads << " index " << i;
      }
    }
  }
}

// A thread that is held up (on a busy machine: not scheduled for a while) must not hold up the
// indices it has not started: the threads that run take them. The first index a helper thread
// takes waits until every other index is done, which only the caller can do; with fixed shares
// (the code before issue 27) the helper's share stayed undone and the wait below ran out. The
// timeout only turns that deadlock into a failure; the passing case never waits for it.
TEST(ParallelForTest, ThreadsThatRunTakeTheIndicesOfAThreadHeldUp) {
  constexpr size_t kN = 64;
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  bool held = false;  // a helper thread is holding one index
  bool timed_out = false;
  size_t by_caller = 0;
  ParallelFor(kN, 2, [&](size_t) {
    std::unique_lock lock(mu);
    if (std::this_thread::get_id() != caller && !held) {
      held = true;
      timed_out = !cv.wait_for(lock, std::chrono::seconds(20), [&] { return done == kN - 1; });
    } else if (std::this_thread::get_id() == caller) {
      ++by_caller;
    }
    ++done;
    cv.notify_all();
  });
  EXPECT_FALSE(timed_out) << "the caller did " << by_caller << " of " << kN - 1
                          << " indices while the helper was held";
  EXPECT_EQ(done, kN);
}

// Helper threads only for CPUs that are idle: the caller's own CPU is always there.
TEST(ParallelForTest, ThreadsForIdleCpusCountsOnlyIdleCpus) {
  EXPECT_EQ(ThreadsForIdleCpus(8, 2, 1), 2u);   // quiet 2-CPU machine: the caller + 1
  EXPECT_EQ(ThreadsForIdleCpus(8, 2, 2), 1u);   // another thread runs: no helper
  EXPECT_EQ(ThreadsForIdleCpus(8, 2, 27), 1u);  // a loaded machine
  EXPECT_EQ(ThreadsForIdleCpus(4, 16, 3), 4u);  // capped at what was asked
  EXPECT_EQ(ThreadsForIdleCpus(8, 16, 3), 8u);  // 13 idle CPUs
  EXPECT_EQ(ThreadsForIdleCpus(1, 16, 1), 1u);
  EXPECT_EQ(ThreadsForIdleCpus(0, 16, 1), 1u);
  EXPECT_EQ(ThreadsForIdleCpus(8, 4, 0), 4u);  // a count of 0 is read as the caller alone
  // From /proc: between 1 and what was asked.
  const size_t now = ThreadsForIdleCpus(8);
  EXPECT_GE(now, 1u);
  EXPECT_LE(now, 8u);
}

}  // namespace
}  // namespace dualpath
