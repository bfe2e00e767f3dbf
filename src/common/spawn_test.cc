// Issue 19, defect 4: children die with their parent (PR_SET_PDEATHSIG), even when the parent is
// SIGKILLed and can clean nothing up.
#include "dualpath/common/spawn.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace dualpath {
namespace {

TEST(SpawnTest, OwnProcessGroupAndExitStatus) {
  SpawnOptions o;
  o.argv = {"sh", "-c", "exit 7"};
  o.own_process_group = true;
  Result<pid_t> pid = SpawnProcess(o);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(getpgid(*pid), *pid);
  int st = 0;
  ASSERT_EQ(waitpid(*pid, &st, 0), *pid);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 7);
}

// A close-on-exec descriptor reaches the child only when listed in inherit_fds (how `cluster run
// --metrics` hands each engine its listening socket).
TEST(SpawnTest, InheritFds) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  const std::string script = "echo hi >&" + std::to_string(p[1]);
  for (const bool inherit : {false, true}) {
    SpawnOptions o;
    o.argv = {"sh", "-c", script};
    if (inherit) o.inherit_fds = {p[1]};
    Result<pid_t> pid = SpawnProcess(o);
    ASSERT_TRUE(pid.ok()) << pid.status().ToString();
    int st = 0;
    ASSERT_EQ(waitpid(*pid, &st, 0), *pid);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st) == 0, inherit);  // without it, the redirection fails: bad fd
  }
  close(p[1]);
  char buf[16] = {};
  EXPECT_EQ(read(p[0], buf, sizeof buf), 3);
  EXPECT_STREQ(buf, "hi\n");
  close(p[0]);
}

TEST(SpawnTest, MissingProgramIsNotFound) {
  SpawnOptions o;
  o.argv = {"dualpath-no-such-program"};
  EXPECT_EQ(SpawnProcess(o).status().code(), Code::kNotFound);
}

TEST(SpawnTest, ChildDiesWhenItsParentIsKilled) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    // The intermediate parent: start a long child, report its pid, wait to be killed.
    SpawnOptions o;
    o.argv = {"sleep", "300"};
    Result<pid_t> child = SpawnProcess(o);
    const pid_t c = child.ok() ? *child : -1;
    if (write(pipefd[1], &c, sizeof c) != sizeof c) _exit(1);
    pause();
    _exit(0);
  }
  close(pipefd[1]);
  pid_t child = -1;
  ASSERT_EQ(read(pipefd[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  close(pipefd[0]);
  ASSERT_GT(child, 0);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
  ASSERT_GE(pidfd, 0);
  kill(parent, SIGKILL);  // no chance to clean up
  waitpid(parent, nullptr, 0);
  // The pidfd turns readable when the orphan exits; a 30 s guard, not a timing assertion.
  pollfd p{pidfd, POLLIN, 0};
  const int ready = poll(&p, 1, 30'000);
  if (ready <= 0) kill(child, SIGKILL);  // do not leave it behind when the test fails
  EXPECT_EQ(ready, 1) << "the child outlived its SIGKILLed parent";
  close(pidfd);
}

}  // namespace
}  // namespace dualpath
