// The run-the-binary fixture of the CLI system tests: runs this build's `dualpath` executable in a
// child shell with arguments, standard input and environment assignments, and captures its exit
// status, stdout and stderr through files in a temporary directory of the test (created in SetUp,
// removed in TearDown; tests may put their own input files there, dir()).
//
// The executable is found through $DUALPATH_BINARY_DIR, which dualpath_test sets for CTest.
// Arguments are passed to /bin/sh as written: callers quote what needs quoting.
//
// Thread safety: one test at a time per fixture object (gtest's model).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dualpath::cli_testing {

struct CliResult {
  int exit_code = -1;  // -1: the child did not exit (killed by a signal)
  std::string out;
  std::string err;
};

// This build's `dualpath` executable; empty when $DUALPATH_BINARY_DIR is not set (not under ctest).
inline std::string DualpathBinary() {
  const char* dir = std::getenv("DUALPATH_BINARY_DIR");
  return dir == nullptr ? std::string() : std::string(dir) + "/bin/dualpath";
}

// The whole file (empty if it cannot be read).
inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = DualpathBinary();
    ASSERT_FALSE(binary_.empty()) << "run under ctest (DUALPATH_BINARY_DIR)";
    std::string tmpl = (std::filesystem::temp_directory_path() / "dualpath_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // Runs `dualpath <args> < stdin_text`.
  CliResult Run(const std::string& args, const std::string& stdin_text = "") {
    return RunWithEnv("", args, stdin_text);
  }

  // Runs `<env> dualpath <args> < stdin_text`; `env`: "NAME=value " assignments for the child.
  CliResult RunWithEnv(const std::string& env, const std::string& args,
                       const std::string& stdin_text = "") {
    const std::string in = dir_ + "/stdin", out = dir_ + "/stdout", err = dir_ + "/stderr";
    std::ofstream(in, std::ios::binary) << stdin_text;
    const std::string cmd =
        env + "'" + binary_ + "' " + args + " < '" + in + "' > '" + out + "' 2> '" + err + "'";
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadWholeFile(out);
    r.err = ReadWholeFile(err);
    return r;
  }

  // The CLI's bad-input contract (docs/cli.md): exit status 2, nothing on stdout, one line on
  // stderr that contains `expect`.
  void ExpectBadInput(const std::string& args, const std::string& stdin_text,
                      const std::string& expect) {
    SCOPED_TRACE(args + " <<< " + stdin_text.substr(0, 40));
    const CliResult r = Run(args, stdin_text);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line
  }

  // The test's temporary directory.
  const std::string& dir() const { return dir_; }

 private:
  std::string binary_;
  std::string dir_;
};

}  // namespace dualpath::cli_testing
