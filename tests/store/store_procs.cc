#include "store_procs.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "dualpath/common/grpc_tls_pki.h"
#include "dualpath/common/spawn.h"
#include "dualpath/transfer/token.h"

namespace dualpath::store::test {

bool WaitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DualpathBinary() {
  const char* dir = std::getenv("DUALPATH_BINARY_DIR");
  return std::string(dir != nullptr ? dir : "build/dev") + "/bin/dualpath";
}

bool Proc::Alive() {
  if (pid <= 0 || wait_status) return false;
  int st = 0;
  if (::waitpid(pid, &st, WNOHANG) == pid) {
    wait_status = st;
    return false;
  }
  return true;
}

int Proc::ExitCode() const {
  return wait_status && WIFEXITED(*wait_status) ? WEXITSTATUS(*wait_status) : -1;
}

void Proc::Kill() {
  if (!Alive()) return;
  ::kill(pid, SIGKILL);
  int st = 0;
  if (::waitpid(pid, &st, 0) == pid) wait_status = st;
}

std::unique_ptr<Proc> SpawnDualpath(std::vector<std::string> args, const std::string& log,
                                    const std::string& ready) {
  auto p = std::make_unique<Proc>();
  p->log = log;
  SpawnOptions o;
  o.argv.push_back(DualpathBinary());
  for (auto& a : args) o.argv.push_back(std::move(a));
  o.log_path = log;
  Result<pid_t> pid = SpawnProcess(o);
  if (!pid.ok()) {
    ADD_FAILURE_AT(__FILE__, __LINE__) << pid.status().ToString();
    return nullptr;
  }
  p->pid = *pid;
  if (!ready.empty()) {
    // The text, or the child gone: either ends the wait (a child that printed and exited counts).
    WaitUntil([&] { return ReadFile(log).find(ready) != std::string::npos || !p->Alive(); });
    if (ReadFile(log).find(ready) == std::string::npos) {
      ADD_FAILURE_AT(__FILE__, __LINE__) << log << ": no '" << ready << "':\n" << ReadFile(log);
    }
  }
  return p;
}

Result<StoreCredentials> StoreCredentials::Create(const std::string& dir) {
  StoreCredentials c;
  c.pki = dir + "/pki";
  RETURN_IF_ERROR(WriteClusterPki(c.pki, {{"node", {"127.0.0.1", "localhost"}},
                                          {"etcd", {"127.0.0.1", "localhost"}},
                                          {"client", {"dualpath-client"}}}));
  c.token = dir + "/transfer.token";
  RETURN_IF_ERROR(transfer::WriteTransferTokenFile(c.token));
  ASSIGN_OR_RETURN(c.client, LoadGrpcTls({.cert = PkiCertPath(c.pki, "client"),
                                          .key = PkiKeyPath(c.pki, "client"),
                                          .ca = PkiCaPath(c.pki)}));
  return c;
}

std::vector<std::string> StoreCredentials::TlsFlags(const std::string& identity) const {
  return {"--tls-cert", PkiCertPath(pki, identity),
          "--tls-key",  PkiKeyPath(pki, identity),
          "--tls-ca",   PkiCaPath(pki)};
}

coord::EtcdServerTls StoreCredentials::EtcdFiles() const {
  return {PkiCertPath(pki, "etcd"), PkiKeyPath(pki, "etcd"), PkiCaPath(pki)};
}

}  // namespace dualpath::store::test
