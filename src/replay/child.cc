#include "child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dualpath/common/spawn.h"

namespace dualpath::replay {

Result<Child> Child::Spawn(const std::vector<std::string>& argv, const std::string& log_path,
                           const std::vector<int>& inherit_fds, bool outlive_parent) {
  if (argv.empty()) {
    return InvalidArgument("Child::Spawn: empty argv");
  }
  // Own process group (pgid = pid) so Signal reaches the whole child tree; SIGKILLed if the
  // orchestrator dies, even by SIGKILL, so no service or engine outlives its run.
  SpawnOptions so;
  so.argv = argv;
  so.log_path = log_path;
  so.own_process_group = true;
  so.death_signal = outlive_parent ? 0 : SIGKILL;
  so.inherit_fds = inherit_fds;
  ASSIGN_OR_RETURN(pid_t pid, SpawnProcess(so));
  // glibc 2.36 declares pidfd_open but this toolchain links no wrapper for it: use the syscall.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int err = errno;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return IoError("pidfd_open for " + argv[0], err);
  }
  return Child(pid, pidfd, log_path);
}

Child::Child(Child&& other) noexcept
    : pid_(other.pid_),
      pidfd_(other.pidfd_),
      log_path_(std::move(other.log_path_)),
      exit_status_(other.exit_status_) {
  other.pid_ = -1;
  other.pidfd_ = -1;
}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    Release();
    pid_ = other.pid_;
    pidfd_ = other.pidfd_;
    log_path_ = std::move(other.log_path_);
    exit_status_ = other.exit_status_;
    other.pid_ = -1;
    other.pidfd_ = -1;
  }
  return *this;
}

Child::~Child() { Release(); }

void Child::Detach() {
  if (pidfd_ >= 0) {
    close(pidfd_);
    pidfd_ = -1;
  }
  pid_ = -1;
}

void Child::Release() {
  if (running()) {
    Stop(2 * kNanosPerSecond);
  }
  if (pidfd_ >= 0) {
    close(pidfd_);
    pidfd_ = -1;
  }
  pid_ = -1;
}

std::optional<int> Child::Poll() {
  if (exit_status_.has_value() || pid_ <= 0) return exit_status_;
  // Peek first (WNOWAIT): while the exited leader is an unreaped zombie its pid, and so its
  // process group id, cannot be reused, so killing what is left of the group is safe.
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != pid_) {
    return std::nullopt;
  }
  kill(-pid_, SIGKILL);
  int status = 0;
  if (waitpid(pid_, &status, 0) == pid_) {
    exit_status_ = status;
  }
  return exit_status_;
}

Result<int> Child::Wait(Nanos timeout) {
  if (std::optional<int> s = Poll(); s.has_value()) return *s;
  // The pidfd becomes readable when the process exits; poll on it instead of sleeping.
  pollfd p{.fd = pidfd_, .events = POLLIN, .revents = 0};
  const int ms = static_cast<int>(std::max<Nanos>(0, timeout / kNanosPerMilli));
  int rc;
  do {
    rc = poll(&p, 1, ms);
  } while (rc < 0 && errno == EINTR);
  if (std::optional<int> s = Poll(); s.has_value()) return *s;
  return Timeout("pid " + std::to_string(pid_) + " still running after " + std::to_string(ms) +
                 " ms");
}

void Child::Signal(int sig) {
  if (running()) {
    kill(-pid_, sig);
  }
}

int Child::Stop(Nanos grace) {
  if (!running()) return exit_status_.value_or(0);
  Signal(SIGTERM);
  if (Result<int> s = Wait(grace); s.ok()) return *s;
  Signal(SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_status_ = status;
  return status;
}

std::string Child::LogTail(size_t bytes) const {
  std::ifstream in(log_path_, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from =
      size > static_cast<std::streamoff>(bytes) ? size - static_cast<std::streamoff>(bytes) : 0;
  in.seekg(from);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "status " + std::to_string(status);
}

}  // namespace dualpath::replay
