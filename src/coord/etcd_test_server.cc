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
  if (dir_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = fmt::format("{}/dp-etcd-XXXXXX", tmp != nullptr ? tmp : "/tmp");
    if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("mkdtemp " + tmpl, errno);
    dir_ = tmpl;
    log_path_ = dir_ + "/etcd.log";
    ASSIGN_OR_RETURN(client_port_, FreePort());
    ASSIGN_OR_RETURN(peer_port_, FreePort());
    endpoint_ = fmt::format("127.0.0.1:{}", client_port_);
  }
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
  Status ready = client->WaitForReady(30 * kNanosPerSecond);
  if (!ready.ok()) {
    Kill();
    return Unavailable(fmt::format("etcd did not come up on {} (log: {}): {}", endpoint_, log_path_,
                                   ready.message()));
  }
  return Status::Ok();
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
