// The embedded script is the checked-in scripts/testbed/testbed.sh, and it is valid bash.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "dualpath/testbed/testbed.h"
#include "testbed/subprocess.h"

namespace dualpath::testbed {
namespace {

TEST(EmbeddedScript, MatchesSourceFile) {
  const char* src = std::getenv("DUALPATH_SOURCE_DIR");
  if (src == nullptr) {
    GTEST_SKIP() << "DUALPATH_SOURCE_DIR is set by CTest; run through ctest";
  }
  std::ifstream in(std::string(src) + "/scripts/testbed/testbed.sh");
  ASSERT_TRUE(in.good());
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string file = buf.str();
  const std::string_view embedded = EmbeddedScript();
  size_t diff = 0;
  while (diff < file.size() && diff < embedded.size() && file[diff] == embedded[diff]) {
    ++diff;
  }
  EXPECT_TRUE(diff == file.size() && diff == embedded.size())
      << "the embedded script is stale (rebuild): first difference at byte " << diff << " of "
      << file.size();
}

TEST(EmbeddedScript, ParsesAsBash) {
  auto r = RunProcess({"bash", "-n", "-c", std::string(EmbeddedScript())});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << r->output;
}

TEST(EmbeddedScript, RejectsUnknownVerb) {
  auto r = RunProcess({"bash", "-c", std::string(EmbeddedScript()), "testbed.sh", "sideways"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("usage"), std::string::npos) << r->output;
}

TEST(RunProcess, ReportsExitCodeAndOutput) {
  auto r = RunProcess({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_NE(r->output.find("out"), std::string::npos);
  EXPECT_NE(r->output.find("err"), std::string::npos);
  EXPECT_FALSE(RunProcess({"dualpath-no-such-program"}).ok());
}

}  // namespace
}  // namespace dualpath::testbed
