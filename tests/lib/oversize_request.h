// Sending a request above a server's limit from a process of its own (grpc_oversize_client, issue
// 25 item 7), and this process's resident memory: what the servers' bounded-request tests measure.
//
//   const int64_t before = oversize::RssBytes();
//   oversize::Call c = oversize::Send(address, "/dualpath.store.v1.StoreMaster/Exists", 2, 256 <<
//   20); EXPECT_EQ(c.code, grpc::StatusCode::RESOURCE_EXHAUSTED) << c.output;
//   EXPECT_LT(oversize::RssBytes() - before, (256 << 20) / 2);
//
// The helper is this build's bin/grpc_oversize_client, found through $DUALPATH_BINARY_DIR (which
// dualpath_test sets for CTest; not a compile definition: an absolute path on the command line
// made every file of the tests that link oversize_request a ccache miss in each fresh clone).
// Thread safety: free functions; Send blocks until the helper exits.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace dualpath::oversize {

// The attack of the issue: a single 256 MiB request.
inline constexpr int64_t kRequestBytes = int64_t{256} << 20;

// Whether this process's peak RSS is the server's memory: not under ThreadSanitizer, whose shadow
// memory adds several bytes for each byte the server's buffers touch (the tests then check the
// refusal only; the debug (ASan) and dev builds check the memory).
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kPeakIsTheServers = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kPeakIsTheServers = false;
#else
inline constexpr bool kPeakIsTheServers = true;
#endif
#else
inline constexpr bool kPeakIsTheServers = true;
#endif

struct Call {
  int code = -1;       // the gRPC status code the client saw; -1 if the helper failed
  std::string output;  // the helper's output (its one line, or why it failed)
};

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM").
inline int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1) * 1024;
  }
  return -1;
}
inline int64_t RssBytes() { return StatusBytes("VmRSS"); }
// The peak resident memory since the last ResetPeak (VmHWM). The peak, not the resident memory
// after the call, is what a refused request cost: a server that accepted and parsed it may have
// returned the memory by then (the old store master peaked at 707 MiB and was back at 86).
inline int64_t PeakBytes() { return StatusBytes("VmHWM"); }
// Sets VmHWM to the current RSS (Linux: "5" written to /proc/self/clear_refs).
inline bool ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

// One call of `method` at `address` with `bytes` zero bytes in protobuf field `field`.
inline Call Send(const std::string& address, const std::string& method, int field, int64_t bytes) {
  Call out;
  const char* bin_dir = std::getenv("DUALPATH_BINARY_DIR");
  if (bin_dir == nullptr) {
    out.output =
        "DUALPATH_BINARY_DIR is not set: run under ctest (it names bin/grpc_oversize_client)";
    return out;
  }
  int pipefd[2];
  if (pipe(pipefd) != 0) return out;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  std::vector<std::string> args = {std::string(bin_dir) + "/bin/grpc_oversize_client", address,
                                   method, std::to_string(field), std::to_string(bytes)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (err == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out.output.append(buf, n);
    int status = 0;
    waitpid(pid, &status, 0);
    const size_t at = out.output.find("code=");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && at != std::string::npos) {
      out.code = std::atoi(out.output.c_str() + at + 5);
    }
  } else {
    out.output = "posix_spawn failed";
  }
  close(pipefd[0]);
  return out;
}

// Send (`bytes`, by default kRequestBytes) and this process's memory around it: RSS before, peak
// during (reset first), RSS after; printed as one line naming `what`.
struct Measured {
  Call call;
  int64_t before = 0;
  int64_t peak = 0;
  int64_t after = 0;
};
inline Measured SendMeasured(const std::string& what, const std::string& address,
                             const std::string& method, int field, int64_t bytes = kRequestBytes) {
  Measured m;
  ResetPeak();
  m.before = RssBytes();
  m.call = Send(address, method, field, bytes);
  m.peak = PeakBytes();
  m.after = RssBytes();
  // Reported with the test (not asserted on here: each test states its bound).
  ::testing::Test::RecordProperty(what + " rss_before_kib", static_cast<int>(m.before >> 10));
  ::testing::Test::RecordProperty(what + " rss_peak_kib", static_cast<int>(m.peak >> 10));
  ::testing::Test::RecordProperty(what + " rss_after_kib", static_cast<int>(m.after >> 10));
  std::printf("%s: %lld MiB request: RSS %.1f MiB before, peak %.1f, after %.1f (%s)\n",
              what.c_str(), static_cast<long long>(bytes >> 20), m.before / 1048576.0,
              m.peak / 1048576.0, m.after / 1048576.0,
              m.call.output.substr(0, m.call.output.find('\n')).c_str());
  return m;
}

}  // namespace dualpath::oversize
