// Starting a child process that cannot outlive us: the one way this project starts programs
// (replay::Child for the orchestrated service and engines, testbed::RunProcess for ip/tc/scripts).
//
// The child gets PR_SET_PDEATHSIG, so it is killed when the thread that spawned it (and so our
// process) dies, even by SIGKILL; optionally a process group of its own (pgid = pid) so that
// whatever it starts can be signalled with it; default signal dispositions and an empty signal
// mask whatever the parent set; stdin from /dev/null. The death signal is not inherited across
// fork(), so daemons a script starts (glusterd) are not tied to us; it is kept across exec of
// `ip netns exec`, which runs the command in place.
//
// Thread safety: may be called from any thread, but the death signal fires when *that thread*
// exits: spawn from a thread that outlives the child (the main thread, or one that waits for it).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  // Where stdout and stderr go: a file opened for append (created 0644) when log_path is set,
  // else this descriptor (dup2'd onto both), else /dev/null.
  std::string log_path;
  int output_fd = -1;
  bool own_process_group = false;
  int death_signal = SIGKILL;  // sent to the child when its parent thread dies; 0: none
  // Descriptors the child inherits under the same numbers (their close-on-exec flag is cleared in
  // the child only), e.g. a listening socket handed over as `--metrics-addr fd:N`. Every other
  // descriptor of ours is close-on-exec.
  std::vector<int> inherit_fds;
};

// Starts the child and returns its pid; kNotFound if argv[0] is not an executable in PATH.
Result<pid_t> SpawnProcess(const SpawnOptions& options);

}  // namespace dualpath
