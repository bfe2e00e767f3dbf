#include "python/fork_guard.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace dualpath::python {
namespace {

std::atomic<pid_t> g_pid{0};

// Runs in the child of every fork() (os.fork, multiprocessing's fork start method) before it
// returns there; async-signal-safe (getpid and an atomic store).
void AfterForkInChild() { g_pid.store(::getpid(), std::memory_order_relaxed); }

}  // namespace

pid_t CurrentPid() {
  // Installed once; a process forked before the first call initializes it with its own pid.
  static const bool installed = [] {
    g_pid.store(::getpid(), std::memory_order_relaxed);
    return ::pthread_atfork(nullptr, nullptr, &AfterForkInChild) == 0;
  }();
  return installed ? g_pid.load(std::memory_order_relaxed) : ::getpid();
}

Status ForkedError(std::string_view what, pid_t owner, std::string_view advice) {
  return Status(Code::kFailedPrecondition,
                std::string(what) + " was opened in process " + std::to_string(owner) +
                    " and this is process " + std::to_string(CurrentPid()) +
                    ", made by fork(): its threads, rings, sockets and locks are the parent's. " +
                    std::string(advice));
}

}  // namespace dualpath::python
