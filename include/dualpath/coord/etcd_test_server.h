// EtcdTestServer: a real single-member etcd (Debian's /usr/bin/etcd) for tests (coord, store), on
// free localhost ports, with a data directory under a temporary directory it removes at the end.
//
// Start spawns etcd (killed with us if the test process dies: spawn.h) and waits until it answers
// a read; Kill sends SIGKILL and reaps it (what a crash looks like); Start again restarts it on
// the same ports and data directory, WipeData empties that directory in between (an etcd that
// lost its state); DUALPATH_KEEP_ETCD_DIR=1 keeps the directory and etcd.log for a look after a
// failure. Short heartbeat and election timeouts (50 ms / 500 ms) make a fresh member
// elect itself quickly and let etcd grant leases as short as 1 s. UseTls runs it with mutual TLS
// on both listeners (etcd_server.h), as `cluster run --store` does.
//
// Thread safety: one test thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/coord/etcd_server.h"

namespace dualpath::coord {

class EtcdTestServer {
 public:
  // The etcd binary: $DUALPATH_ETCD_BIN, else /usr/bin/etcd; empty if it is not executable.
  static std::string Binary();

  EtcdTestServer();
  ~EtcdTestServer();
  EtcdTestServer(const EtcdTestServer&) = delete;
  EtcdTestServer& operator=(const EtcdTestServer&) = delete;

  // Before the first Start: serve HTTPS with mutual TLS, `server` being etcd's files; `client` is
  // the TLS of the readiness check and of ClientOptions().
  void UseTls(EtcdServerTls server, GrpcTls client);

  // Picks ports (first call only), spawns etcd and waits up to 30 s for it to answer. On the first
  // call an etcd that exits before it answers (a port taken meanwhile) is started again on new
  // ports, up to 4 times.
  Status Start();
  // SIGKILL and reap. No-op when not running.
  void Kill();
  // Removes the data directory (etcd must not be running).
  Status WipeData();

  // "127.0.0.1:PORT", the client endpoint.
  const std::string& endpoint() const { return endpoint_; }
  // A client's options: the endpoint, a 1 s call deadline, and the TLS of UseTls (plaintext
  // without it).
  EtcdOptions ClientOptions() const;
  const std::string& log_path() const { return log_path_; }

 private:
  std::string dir_;  // temporary directory: data/ and etcd.log
  std::string endpoint_;
  std::string log_path_;
  int client_port_ = 0;
  int peer_port_ = 0;
  // Spawns etcd on the chosen ports and waits for it; *exited: it exited before it answered.
  Status SpawnAndWait(const std::string& bin, bool* exited);
  pid_t pid_ = -1;
  std::optional<EtcdServerTls> tls_;
  GrpcTls client_tls_{.insecure = true};
};

}  // namespace dualpath::coord
