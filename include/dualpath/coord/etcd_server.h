// How this project starts an etcd member (Debian's /usr/bin/etcd, etcd-server 3.4): the one place
// that writes its command line. `cluster run --store` and `cluster up --store`
// (src/replay/run_store.cc) and the tests' EtcdTestServer (etcd_test_server.h) all run a single
// member through it.
//
// With TLS (docs/coord.md "TLS"), both of the member's listeners are HTTPS with mutual TLS:
//   clients  --cert-file/--key-file (its server certificate), --client-cert-auth and
//            --trusted-ca-file: a client must present a certificate that CA signed, or the
//            handshake is refused (plaintext callers never get past it);
//   peers    the same certificate and CA for the peer URL (--peer-cert-file, --peer-key-file,
//            --peer-client-cert-auth, --peer-trusted-ca-file), so that a single member's peer
//            listener is no open door either.
// The certificate must hold the addresses clients and peers dial as SANs (IP SANs for IP
// literals) and be usable for both server and client authentication (grpc_tls_pki.h issues such
// certificates). Without TLS the URLs are plain http: only tests of plaintext refusal and
// setups that chose --insecure use that.
//
// Thread safety: a pure function.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dualpath::coord {

// PEM files of the member (paths, readable by the etcd process).
struct EtcdServerTls {
  std::string cert;  // the member's certificate (server and client auth)
  std::string key;   // its private key
  std::string ca;    // the CA whose certificates clients and peers must present
};

struct EtcdServerConfig {
  std::string binary = "/usr/bin/etcd";
  std::string name;         // the member's name
  std::string data_dir;     // its data directory
  std::string client_addr;  // HOST:PORT of the client listener (and what it advertises)
  std::string peer_addr;    // HOST:PORT of the peer listener
  std::optional<EtcdServerTls> tls;
  // 50 ms heartbeats and a 500 ms election timeout: a fresh member elects itself at once and
  // grants leases as short as 1 s (tests). Otherwise etcd's defaults (100 ms / 1 s).
  bool fast_election = false;
};

// The argv (binary first) that starts the member: a one-member cluster of its own, zap logger at
// level warn.
std::vector<std::string> EtcdServerArgv(const EtcdServerConfig& config);

// The client URL clients of a member started with `config` use: "https://HOST:PORT" with TLS.
std::string EtcdClientUrl(const EtcdServerConfig& config);

}  // namespace dualpath::coord
