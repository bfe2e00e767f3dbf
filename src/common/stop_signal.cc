#include "dualpath/common/stop_signal.h"

#include <signal.h>

#include <atomic>
#include <string>

namespace dualpath {
namespace {

// Lock-free, so storing it from a signal handler is async-signal-safe.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnStopSignal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a slow system call in the middle of a read or waitpid resumes instead of failing
  // with EINTR; every loop that can take long checks StopSignal() at least every few hundred ms.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int StopSignal() { return g_stop_signal.load(std::memory_order_relaxed); }

void RequestStop(int sig) { OnStopSignal(sig); }

const char* StopSignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a signal";
  }
}

StopSignalWaiter::StopSignalWaiter() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGUSR1);  // Wake
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignalWaiter::Wait() const {
  int sig = 0;
  sigwait(&set_, &sig);  // fails only for an invalid set
  return sig == SIGUSR1 ? 0 : sig;
}

void StopSignalWaiter::Wake(std::thread& waiter) { pthread_kill(waiter.native_handle(), SIGUSR1); }

Status CheckStop() {
  const int sig = StopSignal();
  if (sig == 0) return Status::Ok();
  return Status(Code::kCancelled, std::string("stopped by ") + StopSignalName(sig));
}

}  // namespace dualpath
