#include "dualpath/coord/etcd_test_server.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "dualpath/common/spawn.h"
#include "dualpath/coord/etcd_client.h"

namespace dualpath::coord {

namespace {

// A port the kernel says is free now (bind to port 0, read it back, close). Another process could
// take it before etcd binds it; etcd then fails to start and Start says so.
Result<int> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("bind 127.0.0.1:0", err);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace

std::string EtcdTestServer::Binary() {
  const char* env = std::getenv("DUALPATH_ETCD_BIN");
  std::string path = env != nullptr && *env != '\0' ? env : "/usr/bin/etcd";
  return ::access(path.c_str(), X_OK) == 0 ? path : "";
}

EtcdTestServer::EtcdTestServer() = default;

EtcdTestServer::~EtcdTestServer() {
  Kill();
  if (!dir_.empty()) {
    std::error_code ec;
    if (std::getenv("DUALPATH_KEEP_ETCD_DIR") == nullptr) std::filesystem::remove_all(dir_, ec);
  }
}

Status EtcdTestServer::Start() {
  if (pid_ > 0) return FailedPrecondition("etcd test server already running");
  const std::string bin = Binary();
  if (bin.empty()) return NotFound("etcd binary not found (install etcd-server)");
  const bool first = dir_.empty();
  if (first) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = fmt::format("{}/dp-etcd-XXXXXX", tmp != nullptr ? tmp : "/tmp");
    if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("mkdtemp " + tmpl, errno);
    dir_ = tmpl;
    log_path_ = dir_ + "/etcd.log";
  }
  // The ports are free when picked, not reserved: before etcd binds them another process may take
  // one (an outgoing connection's ephemeral port comes from the same range), and etcd exits at
  // once. The first start then picks new ports and tries again; a restart keeps its endpoint (the
  // test's clients hold it) and reports the exit.
  constexpr int kTries = 4;
  Status last;
  for (int attempt = 0; attempt < (first ? kTries : 1); ++attempt) {
    if (first) {
      if (attempt > 0) {
        std::error_code ec;  // what the exited etcd wrote names its old peer port
        std::filesystem::remove_all(dir_ + "/data", ec);
      }
      ASSIGN_OR_RETURN(client_port_, FreePort());
      ASSIGN_OR_RETURN(peer_port_, FreePort());
      endpoint_ = fmt::format("127.0.0.1:{}", client_port_);
    }
    bool exited = false;
    last = SpawnAndWait(bin, &exited);
    if (last.ok() || !exited) return last;
  }
  return last;
}

Status EtcdTestServer::SpawnAndWait(const std::string& bin, bool* exited) {
  EtcdServerConfig config;
  config.binary = bin;
  config.name = "dp-test";
  config.data_dir = dir_ + "/data";
  config.client_addr = endpoint_;
  config.peer_addr = fmt::format("127.0.0.1:{}", peer_port_);
  config.tls = tls_;
  config.fast_election = true;
  SpawnOptions spawn;
  spawn.argv = EtcdServerArgv(config);
  spawn.log_path = log_path_;
  spawn.own_process_group = true;
  ASSIGN_OR_RETURN(pid_, SpawnProcess(spawn));

  ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> client, EtcdClient::Connect(ClientOptions()));
  // Up to 30 s in steps of 1 s, looking between them whether etcd is still running.
  Status ready;
  for (int waited = 0; waited < 30; ++waited) {
    ready = client->WaitForReady(kNanosPerSecond);
    if (ready.ok()) return Status::Ok();
    int wstatus = 0;
    pid_t r = 0;
    while ((r = ::waitpid(pid_, &wstatus, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r == pid_) {
      pid_ = -1;
      *exited = true;
      return Unavailable(
          fmt::format("etcd on {} exited before it answered (wait status {}; log: {})", endpoint_,
                      wstatus, log_path_));
    }
  }
  Kill();
  return Unavailable(fmt::format("etcd did not come up on {} (log: {}): {}", endpoint_, log_path_,
                                 ready.message()));
}

void EtcdTestServer::UseTls(EtcdServerTls server, GrpcTls client) {
  tls_ = std::move(server);
  client_tls_ = std::move(client);
}

EtcdOptions EtcdTestServer::ClientOptions() const {
  EtcdOptions options;
  options.endpoints = endpoint_;
  options.tls = client_tls_;
  options.rpc_timeout = kNanosPerSecond;
  return options;
}

void EtcdTestServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Status EtcdTestServer::WipeData() {
  if (pid_ > 0) return FailedPrecondition("etcd test server still running");
  std::error_code ec;
  std::filesystem::remove_all(dir_ + "/data", ec);
  if (ec) return IoError(fmt::format("remove {}/data: {}", dir_, ec.message()));
  return Status::Ok();
}

}  // namespace dualpath::coord
