// Private to `dualpath cluster run`: the credentials of one run (docs/cli.md "Security"). A fresh
// CA with one certificate per node (SANs: the node's compute address and its name), usable as the
// engine's EnginePeer server certificate and as its client certificate towards the other engines
// (mutual TLS), and the run's transfer token; all in <cluster state dir>/auth-<run id> (mode 0700,
// keys and token 0600), removed when the run ends. The CA's private key is never written.
//
// The scheduler service of a run listens on a unix socket in the state directory (owner-only), so
// it needs no certificate; the engines reach each other over TCP on the compute network.
//
// Thread safety: immutable after Create.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::replay {

class RunCredentials {
 public:
  static Result<std::unique_ptr<RunCredentials>> Create(const testbed::Cluster& cluster,
                                                        const std::string& run_id);
  ~RunCredentials();  // removes the directory
  RunCredentials(const RunCredentials&) = delete;
  RunCredentials& operator=(const RunCredentials&) = delete;

  // --tls-cert/--tls-key/--tls-ca of node `node`'s engine, and --transfer-token-file.
  std::vector<std::string> EngineArgs(const std::string& node) const;
  const std::string& dir() const { return dir_; }
  // The run's transfer token file (what --transfer-token-file gets).
  std::string token_path() const;

 private:
  explicit RunCredentials(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace dualpath::replay
