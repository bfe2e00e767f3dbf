// What the store's multi-process tests share (store_fault_test, store_auth_test): a wait on a
// condition with a hang guard, `dualpath` children with their output in a log file, and the
// credentials of a store that runs as `cluster run --store` runs it (docs/store.md "Security"):
// a test CA with certificates for the store's processes, etcd and a client, and a transfer token.
//
// Thread safety: one test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_server.h"

namespace dualpath::store::test {

// Polls `done` every 10 ms; false when it still does not hold after 60 s (a hang guard, not a
// timing assertion).
bool WaitUntil(const std::function<bool()>& done);

std::string ReadFile(const std::string& path);

// The `dualpath` binary of this build: $DUALPATH_BINARY_DIR/bin/dualpath (CTest sets it).
std::string DualpathBinary();

// A child `dualpath` process with its output in a log file; SIGKILLed and reaped by Kill() and
// the destructor if still running.
struct Proc {
  pid_t pid = -1;
  std::string log;
  std::optional<int> wait_status;  // set once reaped
  bool frozen = false;             // SIGSTOPped by the test: not asked anything

  // Running (not exited; a stopped process is running). Reaps it once it has exited.
  bool Alive();
  // Reaped within the hang guard.
  bool WaitExit() {
    return WaitUntil([&] { return !Alive(); });
  }
  // The exit status, or -1 when it did not exit normally (or was not reaped).
  int ExitCode() const;
  void Kill();
  ~Proc() { Kill(); }
};

// Starts `dualpath ARGS...` with its output in `log`. With `ready` non-empty, waits until the log
// holds it (a failed test names the child and shows its log otherwise). Null if it could not be
// spawned.
std::unique_ptr<Proc> SpawnDualpath(std::vector<std::string> args, const std::string& log,
                                    const std::string& ready);

// The store's credentials in a directory: <dir>/pki (identities "node": the masters' and nodes'
// server and client certificate, 127.0.0.1 and localhost; "etcd": etcd's; "client") and
// <dir>/transfer.token.
struct StoreCredentials {
  std::string pki;
  std::string token;
  GrpcTls client;  // the "client" certificate and the CA, loaded

  static Result<StoreCredentials> Create(const std::string& dir);
  // --tls-cert/--tls-key/--tls-ca of `identity`.
  std::vector<std::string> TlsFlags(const std::string& identity) const;
  coord::EtcdServerTls EtcdFiles() const;
};

}  // namespace dualpath::store::test
