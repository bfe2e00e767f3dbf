// Transport security of our gRPC endpoints: the one place where the TLS options every server and
// client takes (--tls-cert, --tls-key, --tls-ca, --insecure; docs/cli.md "Security") are checked,
// loaded and turned into gRPC's own credentials (grpc::SslServerCredentials,
// grpc::SslCredentials). StartGrpcServer (grpc_server.h) and MakeChannel (grpc_channel.h) apply
// the rules below; nothing else builds gRPC credentials.
//
// The rules, by address:
//   unix:PATH   no TLS: the socket file is owner-only (grpc_server.h), so the kernel already says
//               who may connect; TLS options are ignored.
//   HOST:PORT   server: TLS with the given certificate and key; with a CA, mutual TLS: every
//               client must present a certificate that CA signed (gRPC refuses the handshake
//               otherwise). Without a certificate the listener refuses to start (kInvalidArgument
//               naming the flags) unless `insecure` is set, which prints a warning.
//               client: TLS, verifying the server against the CA (default: the system's roots)
//               and the host name or IP address against the certificate's SANs; the certificate
//               and key, when given, are presented to a server that asks (mTLS). `insecure`:
//               plaintext, with a warning.
//
// One set of options serves both directions of a process: an engine's certificate is its
// EnginePeer server certificate and its client certificate towards other engines and the
// scheduler (ClusterPki in grpc_tls_pki.h issues certificates for both uses).
//
// Thread safety: pure functions over values (the warnings go through log::Warn).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "dualpath/common/status.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace dualpath {

// The options as given: file paths. Empty paths: not given.
struct GrpcTlsFiles {
  std::string cert;  // --tls-cert: PEM certificate (chain) of this process
  std::string key;   // --tls-key: its PEM private key; must be owner-only (mode 0600 or 0400)
  std::string ca;    // --tls-ca: PEM CA certificate(s): verifies peers; on a server, enables mTLS
  bool insecure = false;  // --insecure: plaintext on TCP (a warning is printed)
  // What the messages call the flags: "" names --tls-cert, --tls-key, --tls-ca and --insecure;
  // "etcd-" names --etcd-tls-cert, ..., --etcd-insecure (the options towards one kind of peer).
  std::string flag_prefix;

  // True when none of the four options was given.
  bool empty() const { return cert.empty() && key.empty() && ca.empty() && !insecure; }
  // The flag `name` ("tls-cert", "insecure") as the user typed it: "--" + flag_prefix + name.
  std::string Flag(std::string_view name) const;
};

// The options loaded: PEM text, read once at start-up (a client or server built from it cannot
// fail on a file any more).
struct GrpcTls {
  bool insecure = false;
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;
};

// What the error messages name: the flags that make a TCP endpoint start.
inline constexpr std::string_view kGrpcTlsFlagsHint =
    "--tls-cert and --tls-key (plus --tls-ca for mutual TLS), or --insecure";

// Checks the combination and reads the files. kInvalidArgument naming the flag (files.Flag) for:
// --tls-cert without --tls-key or the reverse, --insecure together with any file, a file that is
// missing, not a regular file, larger than 1 MiB or without a PEM block, a key file readable by
// group or others, a certificate or CA file whose first PEM block is no X.509 certificate, a key
// that does not parse, and a key that is not the private half of --tls-cert's certificate. All of
// these would otherwise surface later as a server that does not start or a handshake that fails,
// with no flag named.
Result<GrpcTls> LoadGrpcTls(const GrpcTlsFiles& files);

// `given` when any of its options was set, else `fallback`: a process's options towards one kind
// of peer (--etcd-tls-*, --master-tls-*) default to its own --tls-* / --insecure.
Result<GrpcTls> LoadGrpcTlsOr(const GrpcTlsFiles& given, const GrpcTlsFiles& fallback);

// True for unix: and unix-abstract: addresses (no TLS there).
bool IsUnixAddress(std::string_view address);

// The credentials of a server listening on `listen` (see the rules above). `what` names the
// server in messages ("control", "EnginePeer"). kInvalidArgument "<what>: TCP listener <listen>
// needs <kGrpcTlsFlagsHint>" when a TCP listener has neither a certificate nor `insecure`.
Result<std::shared_ptr<grpc::ServerCredentials>> GrpcServerCredentials(const GrpcTls& tls,
                                                                       std::string_view what,
                                                                       const std::string& listen);

// The credentials of a channel to `address` (see the rules above). Never fails: a client without
// options uses TLS with the system's roots, which reach only a server with a publicly trusted
// certificate.
std::shared_ptr<grpc::ChannelCredentials> GrpcChannelCredentials(const GrpcTls& tls,
                                                                 const std::string& address);

}  // namespace dualpath
