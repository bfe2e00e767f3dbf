#include "dualpath/common/stop_signal.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <thread>

namespace dualpath {
namespace {

// Restores the test thread's signal mask, which StopSignalWaiter changes.
class SavedMask {
 public:
  SavedMask() { pthread_sigmask(SIG_SETMASK, nullptr, &saved_); }
  ~SavedMask() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};

bool Blocked(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

TEST(StopSignalWaiterTest, BlocksTheStopSignalsInThreadsStartedAfterIt) {
  SavedMask saved;
  const StopSignalWaiter waiter;
  bool term = false, intr = false, usr1 = false;
  std::thread([&] {
    term = Blocked(SIGTERM);
    intr = Blocked(SIGINT);
    usr1 = Blocked(SIGUSR1);
  }).join();
  EXPECT_TRUE(term);
  EXPECT_TRUE(intr);
  EXPECT_TRUE(usr1);
}

// A SIGTERM sent to the waiting thread is what Wait returns (a signal the thread has blocked
// stays pending until sigwait takes it, so the order of send and wait does not matter).
TEST(StopSignalWaiterTest, WaitReturnsTheStopSignal) {
  SavedMask saved;
  const StopSignalWaiter waiter;
  int got = -1;
  std::thread t([&] { got = waiter.Wait(); });
  ASSERT_EQ(pthread_kill(t.native_handle(), SIGTERM), 0);
  t.join();
  EXPECT_EQ(got, SIGTERM);
}

TEST(StopSignalWaiterTest, WakeEndsTheWaitWithoutAStop) {
  SavedMask saved;
  const StopSignalWaiter waiter;
  int got = -1;
  std::thread t([&] { got = waiter.Wait(); });
  StopSignalWaiter::Wake(t);
  t.join();
  EXPECT_EQ(got, 0);
}

}  // namespace
}  // namespace dualpath
