#include "dualpath/common/grpc_tls_pki.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "common/grpc_tls_openssl.h"
#include "dualpath/common/file.h"

namespace dualpath {
namespace {

using tls_internal::BioPtr;
using tls_internal::CertPtr;
using tls_internal::KeyPtr;

// kIoError naming the call and OpenSSL's first queued error.
Status SslError(const std::string& what) {
  char buf[256] = {};
  ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
  ERR_clear_error();
  return IoError("OpenSSL " + what + ": " + buf);
}

bool IsIpLiteral(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name == "ca" || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return name[0] != '.';
}

Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return SslError("extension " + value);
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? Status::Ok() : SslError("X509_add_ext");
}

// A certificate for `cn` with `key`'s public half, signed by `issuer_key` (issuer null:
// self-signed). Extensions: `exts` (nid, value).
Result<CertPtr> MakeCert(const std::string& cn, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key,
                         int valid_days, const std::vector<std::pair<int, std::string>>& exts) {
  CertPtr cert(X509_new());
  if (cert == nullptr) return SslError("X509_new");
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return SslError("RAND_bytes");
  serial[0] &= 0x7f;  // a positive INTEGER
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(valid_days) * 86400);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("dualpath"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* issuer_cert = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer_cert));
  for (const auto& [nid, value] : exts) {
    RETURN_IF_ERROR(AddExtension(cert.get(), issuer_cert, nid, value));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return SslError("X509_sign " + cn);
  return cert;
}

// Writes the PEM produced by `write` (on a memory BIO) to `path` with `mode`.
template <typename Write>
Status WritePem(const std::string& path, mode_t mode, Write write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return SslError("PEM write " + path);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio.get(), &data);
  // O_EXCL: a fresh directory per run; a leftover file is an error rather than reused.
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoStatus("create " + path, errno);
  if (::fchmod(fd.get(), mode) != 0) return ErrnoStatus("chmod " + path, errno);
  for (long done = 0; done < len;) {
    const ssize_t n = ::write(fd.get(), data + done, static_cast<size_t>(len - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write " + path, errno);
    done += n;
  }
  return Status::Ok();
}

Status WriteIdentity(const std::string& dir, const PkiIdentity& id, X509* ca, EVP_PKEY* ca_key,
                     int valid_days) {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return SslError("EC key for " + id.name);
  std::string sans;
  for (const std::string& s : id.sans) {
    // Appended piecewise: GCC 12 at -O3 (the Python wheel's Release build) reports a false
    // -Wrestrict on `const char* + std::string&&` here (GCC bug 105329).
    if (!sans.empty()) sans += ',';
    sans += IsIpLiteral(s) ? "IP:" : "DNS:";
    sans += s;
  }
  ASSIGN_OR_RETURN(CertPtr cert,
                   MakeCert(id.name, key.get(), ca, ca_key, valid_days,
                            {{NID_basic_constraints, "critical,CA:FALSE"},
                             {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                             {NID_ext_key_usage, "serverAuth,clientAuth"},
                             {NID_subject_alt_name, sans}}));
  RETURN_IF_ERROR(WritePem(PkiKeyPath(dir, id.name), 0600, [&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  }));
  return WritePem(PkiCertPath(dir, id.name), 0644,
                  [&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); });
}

}  // namespace

std::string PkiCaPath(const std::string& dir) { return dir + "/ca.crt"; }
std::string PkiCertPath(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".crt";
}
std::string PkiKeyPath(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".key";
}

Status WriteClusterPki(const std::string& dir, const std::vector<PkiIdentity>& identities,
                       int valid_days) {
  for (const PkiIdentity& id : identities) {
    if (!ValidName(id.name)) {
      return InvalidArgument("pki: identity name '" + id.name + "' is not [A-Za-z0-9._-]+");
    }
    if (id.sans.empty()) return InvalidArgument("pki: identity '" + id.name + "' has no SAN");
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus("mkdir " + dir, errno);
  }
  if (::chmod(dir.c_str(), 0700) != 0) return ErrnoStatus("chmod " + dir, errno);
  KeyPtr ca_key(EVP_EC_gen("P-256"));
  if (ca_key == nullptr) return SslError("EC key for the CA");
  ASSIGN_OR_RETURN(CertPtr ca,
                   MakeCert("dualpath cluster CA", ca_key.get(), nullptr, ca_key.get(), valid_days,
                            {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                             {NID_key_usage, "critical,keyCertSign,cRLSign"},
                             {NID_subject_key_identifier, "hash"}}));
  RETURN_IF_ERROR(
      WritePem(PkiCaPath(dir), 0644, [&](BIO* b) { return PEM_write_bio_X509(b, ca.get()); }));
  for (const PkiIdentity& id : identities) {
    RETURN_IF_ERROR(WriteIdentity(dir, id, ca.get(), ca_key.get(), valid_days));
  }
  return Status::Ok();
}

}  // namespace dualpath
