// A private certificate authority for one cluster's gRPC TLS (grpc_tls.h): what `dualpath cluster
// run` creates for each run in its state directory, and what tests create at run time (no private
// key is ever committed).
//
// WriteClusterPki makes a fresh CA (EC P-256, in memory), issues one certificate per identity,
// signed by it, with the identity's addresses as subject alternative names and usable both as a
// TLS server and a TLS client certificate (extendedKeyUsage serverAuth, clientAuth: an engine
// serves EnginePeer and calls other engines with the same certificate), then forgets the CA's
// private key, so nothing can issue another certificate of this CA later. Files, in `dir`
// (created if absent, mode 0700):
//   ca.crt          the CA certificate (--tls-ca)
//   NAME.crt        the identity's certificate (--tls-cert), mode 0644
//   NAME.key        its private key (--tls-key), mode 0600
//
// Thread safety: a free function; two calls must not write the same directory at once.
#pragma once

#include <string>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath {

struct PkiIdentity {
  std::string name;  // file stem and certificate CN: [A-Za-z0-9._-]+, not "ca"
  // IPv4/IPv6 literals become IP SANs, anything else a DNS SAN ("127.0.0.1", "localhost").
  std::vector<std::string> sans;
};

// Valid from one hour ago (clock skew between nodes) for `valid_days`. kInvalidArgument for a bad
// name or an empty SAN list; kIoError naming the file or the OpenSSL call that failed.
Status WriteClusterPki(const std::string& dir, const std::vector<PkiIdentity>& identities,
                       int valid_days = 7);

std::string PkiCaPath(const std::string& dir);
std::string PkiCertPath(const std::string& dir, const std::string& name);
std::string PkiKeyPath(const std::string& dir, const std::string& name);

}  // namespace dualpath
