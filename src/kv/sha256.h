// SHA-256 for short messages (vLLM sha256_cbor block hashing), with two interchangeable paths:
//  - SHA-NI: the caller builds the padded message in its own buffer and the compression runs with
//    the x86 SHA extensions (sha256_ni.cc); no context object, no per-call dispatch. A 16-token
//    block message is ~86-118 bytes (2 compressions), so OpenSSL's per-call overhead
//    (SHA256_Init/Update/Final bookkeeping) was a large share of its cost.
//  - OpenSSL: SHA256_Init/Update/Final, the fallback where the CPU lacks SHA-NI.
// Both produce identical digests (tested against OpenSSL for every length 0..300 bytes).
//
// Private to src/kv. Thread safety: all functions are pure except ForceImpl, a test hook that
// must not race with hashing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dualpath::kv::sha256 {

inline constexpr size_t kBlockBytes = 64;
// Room a message needs past its last byte for in-place padding (0x80, zeros, 8-byte length).
inline constexpr size_t kPadRoom = kBlockBytes + 8;

enum class Impl : uint8_t { kShaNi, kOpenSsl };

// True when the CPU has the SHA extensions (and SSE4.1); checked once.
bool HaveShaNi();
// The path BlockHasher uses: kShaNi when available, unless a test forced otherwise.
Impl ActiveImpl();
// Test hook: make ActiveImpl() return `impl` (kShaNi requires HaveShaNi()). ResetImpl() restores
// run-time detection.
void ForceImpl(Impl impl);
void ResetImpl();

// Running SHA-256 state over whole 64-byte blocks, compressed with SHA-NI. Only construct when
// HaveShaNi().
class NiState {
 public:
  NiState();
  // Compresses the whole 64-byte blocks of buf[0, *n), moves the partial tail to buf[0] and
  // sets *n to its length.
  void AbsorbBlocks(uint8_t* buf, size_t* n);
  // Pads buf[0, n) in place (buf needs n + kPadRoom bytes), compresses it and writes the digest.
  void Finish(uint8_t* buf, size_t n, uint8_t out[32]);

 private:
  uint32_t h_[8];
  uint64_t absorbed_ = 0;  // bytes already compressed
};

// The SHA-NI compression function over `nblocks` consecutive 64-byte blocks (sha256_ni.cc, built
// with -msha -msse4.1). Only call when HaveShaNi().
void CompressShaNi(uint32_t state[8], const uint8_t* blocks, size_t nblocks);

// One-shot digests through each path (tests, and BlockHasher's NONE_HASH).
void DigestShaNi(const void* data, size_t n, uint8_t out[32]);
void DigestOpenSsl(const void* data, size_t n, uint8_t out[32]);
void Digest(const void* data, size_t n, uint8_t out[32]);  // ActiveImpl()'s path

}  // namespace dualpath::kv::sha256
