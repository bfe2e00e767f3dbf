#include "kv/sha256.h"

// Low-level SHA-256 API (deprecated in OpenSSL 3 in favour of EVP; see docs/kv.md for why).
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <atomic>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "dualpath/common/check.h"

namespace dualpath::kv::sha256 {
namespace {

constexpr uint32_t kInitialState[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

Impl DetectImpl() { return HaveShaNi() ? Impl::kShaNi : Impl::kOpenSsl; }

// Read once per block hash: a relaxed atomic load costs nothing next to a compression.
std::atomic<Impl>& ImplSlot() {
  static std::atomic<Impl> slot{DetectImpl()};
  return slot;
}

}  // namespace

bool HaveShaNi() {
#if defined(__x86_64__)
  // CPUID directly: clang 14's __builtin_cpu_supports does not know "sha" (the fuzz preset
  // builds with clang). SHA: leaf 7 subleaf 0, EBX bit 29; SSE4.1: leaf 1, ECX bit 19.
  static const bool have = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 19)) == 0) return false;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return (b & (1u << 29)) != 0;
  }();
  return have;
#else
  return false;
#endif
}

Impl ActiveImpl() { return ImplSlot().load(std::memory_order_relaxed); }

void ForceImpl(Impl impl) {
  DUALPATH_CHECK(impl != Impl::kShaNi || HaveShaNi(), "ForceImpl(kShaNi) without SHA-NI");
  ImplSlot().store(impl, std::memory_order_relaxed);
}

void ResetImpl() { ImplSlot().store(DetectImpl(), std::memory_order_relaxed); }

NiState::NiState() { std::memcpy(h_, kInitialState, sizeof(h_)); }

void NiState::AbsorbBlocks(uint8_t* buf, size_t* n) {
  const size_t blocks = *n / kBlockBytes;
  if (blocks == 0) return;
  CompressShaNi(h_, buf, blocks);
  const size_t done = blocks * kBlockBytes;
  absorbed_ += done;
  std::memmove(buf, buf + done, *n - done);
  *n -= done;
}

void NiState::Finish(uint8_t* buf, size_t n, uint8_t out[32]) {
  CompressShaNi(h_, buf, PadInPlace(buf, n, absorbed_ + n));
  for (int i = 0; i < 8; ++i) {
    const uint32_t be = __builtin_bswap32(h_[i]);
    std::memcpy(out + 4 * i, &be, 4);
  }
}

void DigestShaNi(const void* data, size_t n, uint8_t out[32]) {
  NiState st;
  alignas(64) uint8_t buf[2 * kBlockBytes + kPadRoom];
  const auto* p = static_cast<const uint8_t*>(data);
  size_t fill = 0;
  while (n > 0) {
    const size_t take = n < 2 * kBlockBytes - fill ? n : 2 * kBlockBytes - fill;
    std::memcpy(buf + fill, p, take);
    fill += take;
    p += take;
    n -= take;
    st.AbsorbBlocks(buf, &fill);
  }
  st.Finish(buf, fill, out);
}

void DigestOpenSsl(const void* data, size_t n, uint8_t out[32]) {
  SHA256_CTX ctx;
  DUALPATH_CHECK(SHA256_Init(&ctx) == 1, "SHA256_Init");
  DUALPATH_CHECK(SHA256_Update(&ctx, data, n) == 1, "SHA256_Update");
  DUALPATH_CHECK(SHA256_Final(out, &ctx) == 1, "SHA256_Final");
}

void Digest(const void* data, size_t n, uint8_t out[32]) {
  if (ActiveImpl() == Impl::kShaNi) {
    DigestShaNi(data, n, out);
  } else {
    DigestOpenSsl(data, n, out);
  }
}

}  // namespace dualpath::kv::sha256
