// Sending a request above a server's limit from a process of its own (grpc_oversize_client, issue
// 25 item 7), and this process's resident memory: what the servers' bounded-request tests measure.
//
//   const int64_t before = oversize::RssBytes();
//   oversize::Call c = oversize::Send(address, "/dualpath.store.v1.StoreMaster/Exists", 2, 256 <<
//   20); EXPECT_EQ(c.code, grpc::StatusCode::RESOURCE_EXHAUSTED) << c.output;
//   EXPECT_LT(oversize::RssBytes() - before, (256 << 20) / 2);
//
// The helper's path comes from the GRPC_OVERSIZE_CLIENT compile definition (tests/CMakeLists.txt,
// target oversize_request). Thread safety: free functions; Send blocks until the helper exits.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace dualpath::oversize {

// The attack of the issue: a single 256 MiB request.
inline constexpr int64_t kRequestBytes = int64_t{256} << 20;

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

// One call of `method` at `address` with `bytes` zero bytes in protobuf field `field`.
inline Call Send(const std::string& address, const std::string& method, int field, int64_t bytes) {
  Call out;
  int pipefd[2];
  if (pipe(pipefd) != 0) return out;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  std::vector<std::string> args = {GRPC_OVERSIZE_CLIENT, address, method, std::to_string(field),
                                   std::to_string(bytes)};
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

}  // namespace dualpath::oversize
