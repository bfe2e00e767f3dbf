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
#include <cstring>

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

// Digest of the padded message msg[0, 64 * nblocks) (see PadInPlace) whose bytes 3..34 are
// `prefix` instead (msg's own bytes there are not read). This is the sha256_cbor chain's hot path:
// the parent digest goes from the previous block's output straight into the first message block
// in registers, off the memory round trip. nblocks >= 1. Only call when HaveShaNi().
void DigestWithPrefix32(const uint8_t* msg, size_t nblocks, const uint8_t prefix[32],
                        uint8_t out[32]);

// A chain of such digests, each message's prefix being the previous digest (`prefix` for the
// first): for step in [0, count), build(ctx, step, msg) writes step's padded message into msg
// (one of msg_bufs, alternating; bytes 3..34 are not read) and returns its block count (>= 1);
// the digest goes to out + 32 * step. The digest never leaves registers between steps, and step
// + 1's message is built before step's compressions so the two overlap. Only when HaveShaNi().
using BuildFn = size_t (*)(void* ctx, size_t step, uint8_t* msg);
void DigestChain(const uint8_t prefix[32], size_t count, BuildFn build, void* ctx,
                 uint8_t* const msg_bufs[2], uint8_t* out);

// Appends SHA-256 padding for a whole n-byte message at buf[n] (buf needs n + kPadRoom bytes) and
// returns the number of 64-byte blocks.
inline size_t PadInPlace(uint8_t* buf, size_t n, uint64_t total_bytes) {
  const size_t total = (n + 1 + 8 + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
  buf[n] = 0x80;
  std::memset(buf + n + 1, 0, total - 8 - (n + 1));
  const uint64_t be_bits = __builtin_bswap64(total_bytes * 8);
  std::memcpy(buf + total - 8, &be_bits, 8);
  return total / kBlockBytes;
}

// One-shot digests through each path (tests, and BlockHasher's NONE_HASH).
void DigestShaNi(const void* data, size_t n, uint8_t out[32]);
void DigestOpenSsl(const void* data, size_t n, uint8_t out[32]);
void Digest(const void* data, size_t n, uint8_t out[32]);  // ActiveImpl()'s path

}  // namespace dualpath::kv::sha256
