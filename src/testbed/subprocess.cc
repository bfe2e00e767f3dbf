#include "testbed/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "dualpath/common/spawn.h"

namespace dualpath::testbed {

Result<ProcessResult> RunProcess(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    return InvalidArgument("RunProcess: empty argv");
  }
  int fds[2];
  // O_CLOEXEC: only the child's stdout/stderr (dup2'd below) may hold the write end, so EOF
  // arrives when the child and whatever it leaves behind without those descriptors are done.
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return IoError("pipe2", errno);
  }
  // Killed if we die (the death signal), so a stopped or crashed dualpath leaves no `ip` or
  // script behind; daemons the script starts fork away from it and are not affected.
  SpawnOptions so;
  so.argv = argv;
  so.output_fd = fds[1];
  so.death_signal = SIGKILL;
  Result<pid_t> spawned = SpawnProcess(so);
  close(fds[1]);
  if (!spawned.ok()) {
    close(fds[0]);
    return spawned.status();
  }
  const pid_t pid = *spawned;

  ProcessResult result;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return IoError(fmt::format("waitpid {}", argv[0]), errno);
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace dualpath::testbed
