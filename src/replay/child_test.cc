#include "child.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace dualpath::replay {
namespace {

std::string TempLog(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/replay_child_test_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

TEST(ChildTest, ExitStatusAndLog) {
  Result<Child> c =
      Child::Spawn({"sh", "-c", "echo hello; echo oops >&2; exit 3"}, TempLog("exit.log"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<int> st = c->Wait(30 * kNanosPerSecond);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(WIFEXITED(*st));
  EXPECT_EQ(WEXITSTATUS(*st), 3);
  EXPECT_EQ(DescribeWaitStatus(*st), "exit 3");
  EXPECT_NE(c->LogTail().find("hello\noops"), std::string::npos);
  EXPECT_FALSE(c->running());
}

TEST(ChildTest, TimeoutThenStopKillsTheGroup) {
  Result<Child> c = Child::Spawn({"sh", "-c", "sleep 300 & echo $! ; wait"}, TempLog("stop.log"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->Wait(50 * kNanosPerMilli).status().code(), Code::kTimeout);
  EXPECT_TRUE(c->running());
  const pid_t pid = c->pid();
  const int st = c->Stop(5 * kNanosPerSecond);
  EXPECT_TRUE(WIFSIGNALED(st));
  EXPECT_FALSE(c->running());
  EXPECT_NE(kill(pid, 0), 0);
}

TEST(ChildTest, DestructorReapsARunningChild) {
  pid_t pid = -1;
  {
    Result<Child> c = Child::Spawn({"sleep", "300"}, TempLog("dtor.log"));
    ASSERT_TRUE(c.ok());
    pid = c->pid();
    EXPECT_EQ(kill(pid, 0), 0);
  }
  EXPECT_NE(kill(pid, 0), 0);
  EXPECT_EQ(errno, ESRCH);
}

TEST(ChildTest, MissingProgramIsAnError) {
  Result<Child> c = Child::Spawn({"/nonexistent/program"}, TempLog("missing.log"));
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/program"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::replay
