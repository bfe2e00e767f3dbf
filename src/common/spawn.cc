#include "dualpath/common/spawn.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace dualpath {
namespace {

// argv[0] resolved against PATH in the parent: between fork and exec only async-signal-safe calls
// are allowed (other threads may hold malloc's locks), so execvp's search cannot run there.
std::string ResolveInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t end = dirs.find(':', pos);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(pos, end - pos);
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) {
      return cand;
    }
    pos = end + 1;
  }
  return "";
}

// In the child after fork: report errno through the pipe and exit (async-signal-safe only).
[[noreturn]] void ChildFail(int fd) {
  const int err = errno;
  ssize_t ignored = write(fd, &err, sizeof err);
  (void)ignored;
  _exit(127);
}

}  // namespace

Result<pid_t> SpawnProcess(const SpawnOptions& o) {
  if (o.argv.empty()) return InvalidArgument("SpawnProcess: empty argv");
  const std::string exe = ResolveInPath(o.argv[0]);
  if (exe.empty()) return NotFound("start " + o.argv[0] + ": not found in PATH");
  std::vector<char*> args;
  for (const std::string& a : o.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Reports a failure between fork and exec (errno); closed by a successful exec (O_CLOEXEC).
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return IoError("pipe2", errno);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(report[0]);
    close(report[1]);
    return IoError("fork for " + o.argv[0], err);
  }
  if (pid == 0) {
    if (o.death_signal != 0) {
      if (prctl(PR_SET_PDEATHSIG, o.death_signal) != 0) ChildFail(report[1]);
      // The parent may have died before prctl: then nobody will send the signal.
      if (getppid() != parent) _exit(128 + o.death_signal);
    }
    if (o.own_process_group && setpgid(0, 0) != 0) ChildFail(report[1]);
    // Default dispositions for every signal and an empty mask, whatever the parent set.
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);  // dup2 drops O_CLOEXEC on 0
    if (in < 0 || dup2(in, STDIN_FILENO) < 0) ChildFail(report[1]);
    int out = o.output_fd;
    if (!o.log_path.empty()) {
      // O_NOFOLLOW: a log is never written through a symlink planted at its name.
      out = open(o.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    } else if (out < 0) {
      out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    }
    if (out < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(out, STDERR_FILENO) < 0) {
      ChildFail(report[1]);
    }
    // dup2 onto itself keeps O_CLOEXEC (a parent with 0, 1 or 2 closed): clear it there.
    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) fcntl(fd, F_SETFD, 0);
    for (const int fd : o.inherit_fds) {
      if (fcntl(fd, F_SETFD, 0) != 0) ChildFail(report[1]);
    }
    execve(exe.c_str(), args.data(), environ);
    ChildFail(report[1]);
  }
  // Set the group from this side too, so it exists before anyone signals -pid.
  if (o.own_process_group) setpgid(pid, pid);
  close(report[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return IoError("start " + o.argv[0] + (o.log_path.empty() ? "" : " (log " + o.log_path + ")"),
                   child_errno);
  }
  return pid;
}

}  // namespace dualpath
