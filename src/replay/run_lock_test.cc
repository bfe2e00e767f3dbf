#include "run_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace dualpath::replay {
namespace {

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "run_lock_test.XXXXXX").string();
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

TEST(RunLockTest, SecondClaimOnTheSameClusterIsRefusedNamingTheHolder) {
  const std::string dir = TempDir() + "/nested";  // created on demand
  Result<RunLock> first = RunLock::Acquire(dir, "c1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<RunLock> second = RunLock::Acquire(dir, "c1");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  const std::string msg = second.status().ToString();
  EXPECT_NE(msg.find("cluster 'c1' is in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(getpid())), std::string::npos) << msg;
  // Another cluster is independent.
  EXPECT_TRUE(RunLock::Acquire(dir, "c2").ok());
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

TEST(RunLockTest, ReleasedWhenTheHolderGoesAway) {
  const std::string dir = TempDir();
  {
    Result<RunLock> held = RunLock::Acquire(dir, "c");
    ASSERT_TRUE(held.ok());
    RunLock moved = std::move(held).value();  // the claim moves with the object
    EXPECT_FALSE(RunLock::Acquire(dir, "c").ok());
  }
  EXPECT_TRUE(RunLock::Acquire(dir, "c").ok());
  // A process that dies holding the claim (a killed `cluster run`) leaves no stale claim.
  int ready[2];
  int go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Result<RunLock> child = RunLock::Acquire(dir, "c");
    char c = child.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    (void)!read(go[0], &c, 1);  // hold the claim until the parent has checked
    _exit(0);                   // no destructor runs: the kernel drops the flock
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  Result<RunLock> while_held = RunLock::Acquire(dir, "c");
  ASSERT_FALSE(while_held.ok());
  EXPECT_NE(while_held.status().ToString().find("pid " + std::to_string(pid)), std::string::npos)
      << while_held.status().ToString();
  (void)!write(go[1], &c, 1);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(RunLock::Acquire(dir, "c").ok());
  std::filesystem::remove_all(dir);
}

TEST(RunLockTest, NameThatCannotBeAFileIsRejected) {
  const std::string dir = TempDir();
  Result<RunLock> r = RunLock::Acquire(dir, "../x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(RunLock::Acquire(dir, "").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dualpath::replay
