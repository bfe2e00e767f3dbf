// Private to `dualpath cluster run` and `cluster up --store`: the credentials of one run (or of one
// cluster's store), docs/cli.md "Security" and docs/store.md "Security". A fresh CA and, signed by
// it, usable both as TLS server and client certificates:
//   <node>   one per testbed node (SANs: the node's compute address and its name): the engine's
//            EnginePeer certificate and its client certificate towards the other engines and the
//            store, and the certificate of the store master and store node on that node;
//   etcd     the store's etcd (SANs: the first node's compute address, where it listens, and
//            127.0.0.1 / localhost for its peer listener);
//   client   what tools use towards the store's etcd and masters (`store stats`, `store bench`,
//            the service's hit probe, a user's ClusterStore);
// and the transfer token the engines' and store nodes' transfer engines check. All in one
// directory (mode 0700, keys and token 0600); the CA's private key is never written, so nobody
// can issue another certificate of this CA. `cluster run`: <state dir>/auth-<run id>, removed
// when the run ends; `cluster up --store`: <state dir>/store-auth, kept (Keep) until `cluster
// down` removes the state directory.
//
// The scheduler service of a run listens on a unix socket in the state directory (owner-only), so
// it needs no certificate; the engines reach each other, and everything reaches the store, over
// TCP on the compute network.
//
// Thread safety: immutable after Create.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_server.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::replay {

class RunCredentials {
 public:
  // The identities that are no node (testbed node names are p<i> / d<i>, so they cannot clash).
  static constexpr const char* kEtcd = "etcd";
  static constexpr const char* kClient = "client";

  // `cluster run`: in <state dir>/auth-<run id>, removed by the destructor.
  static Result<std::unique_ptr<RunCredentials>> Create(const testbed::Cluster& cluster,
                                                        const std::string& run_id);
  // In `dir` (created; any earlier credentials there are replaced). Removed by the destructor
  // unless Keep() was called.
  static Result<std::unique_ptr<RunCredentials>> CreateIn(const testbed::Cluster& cluster,
                                                          const std::string& dir);
  ~RunCredentials();
  RunCredentials(const RunCredentials&) = delete;
  RunCredentials& operator=(const RunCredentials&) = delete;

  // The destructor leaves the directory (it outlives this process: `cluster up --store`).
  void Keep() { keep_ = true; }

  // --tls-cert/--tls-key/--tls-ca of node `node`'s engine, and --transfer-token-file.
  std::vector<std::string> EngineArgs(const std::string& node) const;
  // --<prefix>tls-cert, --<prefix>tls-key, --<prefix>tls-ca of identity `name` (a node's name,
  // kEtcd or kClient); prefix "" or e.g. "kv-store-".
  std::vector<std::string> TlsArgs(const std::string& name, const std::string& prefix = "") const;
  // etcd's own files (coord::EtcdServerArgv).
  coord::EtcdServerTls EtcdFiles() const;
  const std::string& dir() const { return dir_; }
  // The run's transfer token file (what --transfer-token-file gets).
  std::string token_path() const;

 private:
  explicit RunCredentials(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  bool keep_ = false;
};

}  // namespace dualpath::replay
