#include "dualpath/common/grpc_tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <mutex>
#include <set>

#include "common/grpc_tls_openssl.h"
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

using tls_internal::BioPtr;
using tls_internal::CertPtr;
using tls_internal::KeyPtr;

BioPtr PemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of `pem`, or null. OpenSSL's error queue is cleared either way: a failed
// parse here must not show up as the reason of an unrelated later OpenSSL call (gRPC's).
CertPtr FirstCertificate(const std::string& pem) {
  auto bio = PemBio(pem);
  CertPtr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  return cert;
}

// What gRPC would find out only when a server starts or a handshake runs (and then report as a
// log line of its own, naming no flag): a certificate file without a certificate, a key that does
// not parse, a key that is not the certificate's. Checked with the same library gRPC's TLS uses.
Status CheckKeyPair(const GrpcTlsFiles& files, const GrpcTls& tls) {
  auto cert = FirstCertificate(tls.cert_pem);
  if (cert == nullptr) {
    return InvalidArgument(files.Flag("tls-cert") + " " + files.cert +
                           " holds no X.509 certificate (PEM \"CERTIFICATE\")");
  }
  auto bio = PemBio(tls.key_pem);
  KeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  if (key == nullptr) {
    return InvalidArgument(files.Flag("tls-key") + " " + files.key +
                           " holds no private key that parses (an unencrypted PEM key is needed)");
  }
  const bool match = X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!match) {
    return InvalidArgument(files.Flag("tls-key") + " " + files.key +
                           " is not the private key of the certificate in " +
                           files.Flag("tls-cert") + " " + files.cert);
  }
  return Status::Ok();
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

std::string GrpcTlsFiles::Flag(std::string_view name) const {
  return "--" + flag_prefix + std::string(name);
}

Result<GrpcTls> LoadGrpcTls(const GrpcTlsFiles& files) {
  GrpcTls tls;
  tls.insecure = files.insecure;
  const bool any_file = !files.cert.empty() || !files.key.empty() || !files.ca.empty();
  const std::string cert_flag = files.Flag("tls-cert"), key_flag = files.Flag("tls-key"),
                    ca_flag = files.Flag("tls-ca");
  if (files.insecure && any_file) {
    return InvalidArgument(files.Flag("insecure") + " cannot be combined with " + cert_flag + ", " +
                           key_flag + " or " + ca_flag);
  }
  if (files.cert.empty() != files.key.empty()) {
    return InvalidArgument(cert_flag + " and " + key_flag + " go together: give both or neither");
  }
  if (!files.cert.empty()) {
    ASSIGN_OR_RETURN(tls.cert_pem, ReadPem(files.cert, cert_flag, false));
    ASSIGN_OR_RETURN(tls.key_pem, ReadPem(files.key, key_flag, true));
    RETURN_IF_ERROR(CheckKeyPair(files, tls));
  }
  if (!files.ca.empty()) {
    ASSIGN_OR_RETURN(tls.ca_pem, ReadPem(files.ca, ca_flag, false));
    if (FirstCertificate(tls.ca_pem) == nullptr) {
      return InvalidArgument(ca_flag + " " + files.ca +
                             " holds no X.509 certificate (PEM \"CERTIFICATE\")");
    }
  }
  return tls;
}

Result<GrpcTls> LoadGrpcTlsOr(const GrpcTlsFiles& given, const GrpcTlsFiles& fallback) {
  return LoadGrpcTls(given.empty() ? fallback : given);
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
