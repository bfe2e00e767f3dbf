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
  bool held = false;      // a helper thread is holding one index
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

}  // namespace
}  // namespace dualpath
