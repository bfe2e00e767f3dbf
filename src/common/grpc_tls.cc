#include "dualpath/common/grpc_tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <mutex>
#include <set>

#include "dualpath/common/file.h"
#include "dualpath/common/log.h"

namespace dualpath {
namespace {

// PEM files are a few KiB; a CA bundle may hold a few hundred certificates.
constexpr uint64_t kMaxPemBytes = uint64_t{1} << 20;

Result<std::string> ReadPem(const std::string& path, std::string_view flag, bool secret) {
  Result<std::string> text =
      secret ? ReadSecretFile(path, flag, kMaxPemBytes) : ReadInputFile(path, flag, kMaxPemBytes);
  if (!text.ok()) return text.status();
  if (text->find("-----BEGIN ") == std::string::npos) {
    return InvalidArgument(std::string(flag) + " " + path + " holds no PEM block");
  }
  return text;
}

// Once per (what, address): a peer directory opens many channels to the same few addresses.
void WarnInsecure(std::string_view what, const std::string& address) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(std::string(what) + " " + address).second) return;
  log::Warn("{} {} is not authenticated (--insecure): plaintext, anyone who reaches it can call it",
            what, address);
}

}  // namespace

bool IsUnixAddress(std::string_view address) { return address.rfind("unix", 0) == 0; }

Result<GrpcTls> LoadGrpcTls(const GrpcTlsFiles& files) {
  GrpcTls tls;
  tls.insecure = files.insecure;
  const bool any_file = !files.cert.empty() || !files.key.empty() || !files.ca.empty();
  if (files.insecure && any_file) {
    return InvalidArgument("--insecure cannot be combined with --tls-cert, --tls-key or --tls-ca");
  }
  if (files.cert.empty() != files.key.empty()) {
    return InvalidArgument("--tls-cert and --tls-key go together: give both or neither");
  }
  if (!files.cert.empty()) {
    ASSIGN_OR_RETURN(tls.cert_pem, ReadPem(files.cert, "--tls-cert", false));
    ASSIGN_OR_RETURN(tls.key_pem, ReadPem(files.key, "--tls-key", true));
  }
  if (!files.ca.empty()) {
    ASSIGN_OR_RETURN(tls.ca_pem, ReadPem(files.ca, "--tls-ca", false));
  }
  return tls;
}

Result<std::shared_ptr<grpc::ServerCredentials>> GrpcServerCredentials(const GrpcTls& tls,
                                                                       std::string_view what,
                                                                       const std::string& listen) {
  if (IsUnixAddress(listen)) return grpc::InsecureServerCredentials();
  if (tls.insecure) {
    WarnInsecure(what, listen);
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_pem.empty()) {
    return InvalidArgument(
        fmt::format("{}: TCP listener {} needs {}", what, listen, kGrpcTlsFlagsHint));
  }
  grpc::SslServerCredentialsOptions options(
      tls.ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                         : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca_pem;
  options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> GrpcChannelCredentials(const GrpcTls& tls,
                                                                 const std::string& address) {
  if (IsUnixAddress(address)) return grpc::InsecureChannelCredentials();
  if (tls.insecure) {
    WarnInsecure("channel to", address);
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;  // empty: gRPC's default roots (the system's)
  options.pem_private_key = tls.key_pem;
  options.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(options);
}

}  // namespace dualpath
