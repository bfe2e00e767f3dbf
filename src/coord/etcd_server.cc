#include "dualpath/coord/etcd_server.h"

namespace dualpath::coord {
namespace {

std::string Url(const EtcdServerConfig& c, const std::string& addr) {
  return (c.tls ? "https://" : "http://") + addr;
}

}  // namespace

std::string EtcdClientUrl(const EtcdServerConfig& config) {
  return Url(config, config.client_addr);
}

std::vector<std::string> EtcdServerArgv(const EtcdServerConfig& c) {
  const std::string client_url = Url(c, c.client_addr);
  const std::string peer_url = Url(c, c.peer_addr);
  std::vector<std::string> argv = {c.binary,
                                   "--name=" + c.name,
                                   "--data-dir=" + c.data_dir,
                                   "--listen-client-urls=" + client_url,
                                   "--advertise-client-urls=" + client_url,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=" + c.name + "=" + peer_url,
                                   "--logger=zap",
                                   "--log-level=warn"};
  if (c.fast_election) {
    argv.insert(argv.end(), {"--heartbeat-interval=50", "--election-timeout=500"});
  }
  if (c.tls) {
    argv.insert(argv.end(), {"--cert-file=" + c.tls->cert, "--key-file=" + c.tls->key,
                             "--client-cert-auth", "--trusted-ca-file=" + c.tls->ca,
                             "--peer-cert-file=" + c.tls->cert, "--peer-key-file=" + c.tls->key,
                             "--peer-client-cert-auth", "--peer-trusted-ca-file=" + c.tls->ca});
  }
  return argv;
}

}  // namespace dualpath::coord
