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
  return CreateIn(cluster, cluster.state_dir + "/auth-" + run_id);
}

Result<std::unique_ptr<RunCredentials>> RunCredentials::CreateIn(const testbed::Cluster& cluster,
                                                                 const std::string& dir) {
  if (cluster.nodes.empty()) return InvalidArgument("credentials: the cluster has no nodes");
  // Files are created O_EXCL: a directory left by an earlier, crashed `cluster up --store` goes
  // first (it holds nothing anyone else uses: its store died with it or with `cluster down`).
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::unique_ptr<RunCredentials> c(new RunCredentials(dir));
  std::vector<PkiIdentity> ids;
  for (const testbed::Node& n : cluster.nodes) ids.push_back({n.name, {n.compute_addr, n.name}});
  // etcd listens on the first node's compute address; its peer listener on 127.0.0.1 there.
  ids.push_back({kEtcd, {cluster.nodes[0].compute_addr, "127.0.0.1", "localhost"}});
  // A client certificate only: the name is no address anything listens on.
  ids.push_back({kClient, {"dualpath-client"}});
  // On failure the destructor removes what was written.
  RETURN_IF_ERROR(WriteClusterPki(c->dir_, ids).WithContext("cluster credentials"));
  RETURN_IF_ERROR(transfer::WriteTransferTokenFile(TokenPath(c->dir_)));
  return c;
}

RunCredentials::~RunCredentials() {
  if (keep_) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  if (ec) log::Warn("cluster run: remove {}: {}", dir_, ec.message());
}

std::string RunCredentials::token_path() const { return TokenPath(dir_); }

std::vector<std::string> RunCredentials::TlsArgs(const std::string& name,
                                                 const std::string& prefix) const {
  return {"--" + prefix + "tls-cert", PkiCertPath(dir_, name),  "--" + prefix + "tls-key",
          PkiKeyPath(dir_, name),     "--" + prefix + "tls-ca", PkiCaPath(dir_)};
}

std::vector<std::string> RunCredentials::EngineArgs(const std::string& node) const {
  std::vector<std::string> args = TlsArgs(node);
  args.insert(args.end(), {"--transfer-token-file", TokenPath(dir_)});
  return args;
}

coord::EtcdServerTls RunCredentials::EtcdFiles() const {
  return {PkiCertPath(dir_, kEtcd), PkiKeyPath(dir_, kEtcd), PkiCaPath(dir_)};
}

}  // namespace dualpath::replay
