// A process-wide stop request from SIGINT or SIGTERM, for long-running commands that own children
// or state they must clean up (`cluster run`, `cluster up`): instead of dying where they stand,
// they notice the request at their next check, stop what they started, and exit 128 + the signal.
//
// InstallStopHandlers replaces the default action (and an inherited SIG_IGN: a command started in
// the background by a non-interactive shell inherits SIGINT ignored, and must still stop on it)
// with a handler that only records the signal; StopSignal / CheckStop read the record. The first
// signal counts; later ones change nothing, so cleanup is not interrupted halfway.
//
// Thread safety: all functions may be called from any thread; the handler is async-signal-safe.
#pragma once

#include <signal.h>

#include <thread>

#include "dualpath/common/status.h"

namespace dualpath {

// Installs the recording handler for SIGINT and SIGTERM (idempotent).
void InstallStopHandlers();

// The signal that requested the stop (SIGINT or SIGTERM), 0 if none has arrived.
int StopSignal();

// Records `sig` as if it had been delivered (tests; and commands that take signals with sigwait).
void RequestStop(int sig);

// Ok, or kCancelled "stopped by SIGTERM" once a stop was requested.
Status CheckStop();

// "SIGTERM", "SIGINT", else "signal N".
const char* StopSignalName(int sig);

// The exit status for a command stopped by `sig`: 128 + sig (130 for SIGINT, 143 for SIGTERM).
inline int StopExitCode(int sig) { return 128 + sig; }

// For services that take SIGINT / SIGTERM on one thread with sigwait rather than in a handler
// (`engine`, `control serve`, `store master|node`, `pool serve`). Constructing it blocks both, and
// SIGUSR1 (Wake), in the calling thread: construct it before any thread starts (gRPC's, UCX's,
// the pool's), so that every thread inherits the mask and Wait is the only taker.
class StopSignalWaiter {
 public:
  StopSignalWaiter();
  StopSignalWaiter(const StopSignalWaiter&) = delete;
  StopSignalWaiter& operator=(const StopSignalWaiter&) = delete;

  // Blocks until SIGINT or SIGTERM arrives (returns it) or Wake is called (returns 0).
  int Wait() const;
  // Ends a Wait running on `waiter` without a stop (the service finished on its own).
  static void Wake(std::thread& waiter);

 private:
  sigset_t set_;
};

}  // namespace dualpath
