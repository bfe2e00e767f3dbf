// Private to common_grpc's TLS code (grpc_tls.cc, grpc_tls_pki.cc): owning pointers to OpenSSL
// objects, so that every early return frees what was allocated.
//
// Thread safety: plain values.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>

namespace dualpath::tls_internal {

struct FreeKey {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct FreeCert {
  void operator()(X509* c) const { X509_free(c); }
};
struct FreeBio {
  void operator()(BIO* b) const { BIO_free(b); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, FreeKey>;
using CertPtr = std::unique_ptr<X509, FreeCert>;
using BioPtr = std::unique_ptr<BIO, FreeBio>;

}  // namespace dualpath::tls_internal
