#include "run_credentials.h"

#include <filesystem>

#include "dualpath/common/grpc_tls_pki.h"
#include "dualpath/common/log.h"
#include "dualpath/transfer/token.h"

namespace dualpath::replay {
namespace {

std::string TokenPath(const std::string& dir) { return dir + "/transfer.token"; }

}  // namespace

Result<std::unique_ptr<RunCredentials>> RunCredentials::Create(const testbed::Cluster& cluster,
                                                               const std::string& run_id) {
  std::unique_ptr<RunCredentials> c(new RunCredentials(cluster.state_dir + "/auth-" + run_id));
  std::vector<PkiIdentity> ids;
  for (const testbed::Node& n : cluster.nodes) ids.push_back({n.name, {n.compute_addr, n.name}});
  // On failure the destructor removes what was written.
  RETURN_IF_ERROR(WriteClusterPki(c->dir_, ids).WithContext("cluster run credentials"));
  RETURN_IF_ERROR(transfer::WriteTransferTokenFile(TokenPath(c->dir_)));
  return c;
}

RunCredentials::~RunCredentials() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  if (ec) log::Warn("cluster run: remove {}: {}", dir_, ec.message());
}

std::string RunCredentials::token_path() const { return TokenPath(dir_); }

std::vector<std::string> RunCredentials::EngineArgs(const std::string& node) const {
  return {
      "--tls-cert",    PkiCertPath(dir_, node), "--tls-key",    PkiKeyPath(dir_, node), "--tls-ca",
      PkiCaPath(dir_), "--transfer-token-file", TokenPath(dir_)};
}

}  // namespace dualpath::replay
