// The fork guard of the bindings (fork_guard.h): an object knows the process that opened it, and a
// forked child sees itself as another process without a getpid() per check.
#include "python/fork_guard.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace dualpath::python {
namespace {

TEST(ForkGuardTest, ChildOfTheOwnerIsAnotherProcess) {
  const OwnerProcess owner;
  ASSERT_EQ(CurrentPid(), ::getpid());
  EXPECT_FALSE(owner.forked());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe work and _exit in the child: the exit status carries the result.
    int bad = 0;
    if (CurrentPid() != ::getpid()) bad |= 1;
    if (!owner.forked()) bad |= 2;
    if (OwnerProcess().forked()) bad |= 4;  // one opened in the child belongs to it
    ::_exit(bad);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit 1: stale pid, 2: owner not seen as forked, "
                                       "4: a child's own object seen as forked";
  EXPECT_FALSE(owner.forked());  // the parent is unchanged
}

TEST(ForkGuardTest, ErrorNamesBothProcessesAndWhatToDo) {
  const Status s = ForkedError("KVStore", 42, "Open a new KVStore in this process.");
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("KVStore was opened in process 42 and this is process " +
                             std::to_string(::getpid())),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("fork()"), std::string::npos);
  EXPECT_NE(s.message().find("Open a new KVStore in this process"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::python
