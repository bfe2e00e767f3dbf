// A child process the orchestrator owns: spawned with its output in a log file, waited for with a
// timeout (pidfd + poll, no sleeping), killed if it overstays. The destructor kills and reaps a
// child that is still running, so an error path never leaves processes behind.
//
// Each child gets its own process group, so Kill reaches whatever it started too (`ip netns
// exec` runs the command in place, but a wrapper script might fork).
//
// Thread safety: one owner thread per Child.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"

namespace dualpath::replay {

class Child {
 public:
  // Starts argv[0] (looked up in PATH) with stdout and stderr appended to log_path; the child
  // inherits `inherit_fds` (SpawnOptions::inherit_fds).
  // The child is killed (SIGKILL) when this thread dies, unless `outlive_parent` (a daemon that
  // Detach() will leave running).
  static Result<Child> Spawn(const std::vector<std::string>& argv, const std::string& log_path,
                             const std::vector<int>& inherit_fds = {}, bool outlive_parent = false);

  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  bool running() const { return pid_ > 0 && !exit_status_.has_value(); }

  // Non-blocking: the wait status if the child has exited (reaping it), else nullopt.
  std::optional<int> Poll();
  // Waits at most `timeout` for the child to exit; the wait status, or kTimeout.
  Result<int> Wait(Nanos timeout);
  // Sends `sig` to the child's process group (no-op once it has been reaped).
  void Signal(int sig);
  // TERM, wait up to `grace`, then KILL and reap. Returns the wait status.
  int Stop(Nanos grace);

  // Lets the child run on without this object: it is neither killed nor reaped here (it is
  // reparented when this process exits). `cluster up --store` leaves its daemons this way; `cluster
  // down` kills everything in the cluster's namespaces.
  void Detach();

  // The last `bytes` of the log, for error messages.
  std::string LogTail(size_t bytes = 2000) const;

 private:
  Child(pid_t pid, int pidfd, std::string log_path)
      : pid_(pid), pidfd_(pidfd), log_path_(std::move(log_path)) {}
  void Release();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::string log_path_;
  std::optional<int> exit_status_;
};

// "exit 3", "signal 9 (Killed)".
std::string DescribeWaitStatus(int status);

}  // namespace dualpath::replay
