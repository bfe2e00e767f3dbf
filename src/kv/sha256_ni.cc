// SHA-256 compression with the x86 SHA extensions. This file alone is compiled with -msha
// -msse4.1 (src/kv/CMakeLists.txt); callers dispatch with sha256::HaveShaNi() first.
#include "kv/sha256.h"

#if defined(__x86_64__) && defined(__SHA__)
#include <immintrin.h>
#endif

namespace dualpath::kv::sha256 {

#if defined(__x86_64__) && defined(__SHA__)

namespace {

alignas(64) constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// Big-endian message words / digest bytes: reverses the bytes of each 32-bit lane.
inline __m128i Bswap32(__m128i v) {
  return _mm_shuffle_epi8(v, _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL));
}

// One 64-byte block (message words m0..m3, already big-endian) on the state in the SHA-NI
// instructions' ABEF / CDGH layout.
inline void Rounds(__m128i* abef_io, __m128i* cdgh_io, __m128i m0, __m128i m1, __m128i m2,
                   __m128i m3) {
  __m128i abef = *abef_io;
  __m128i cdgh = *cdgh_io;
  __m128i w[4] = {m0, m1, m2, m3};
#pragma GCC unroll 16
  for (int g = 0; g < 16; ++g) {  // 16 groups of 4 rounds
    if (g >= 4) {
      // W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16], four words at a time.
      const __m128i prev = w[(g - 1) & 3];
      __m128i cur = _mm_sha256msg1_epu32(w[g & 3], w[(g - 3) & 3]);
      cur = _mm_add_epi32(cur, _mm_alignr_epi8(prev, w[(g - 2) & 3], 4));
      w[g & 3] = _mm_sha256msg2_epu32(cur, prev);
    }
    __m128i wk =
        _mm_add_epi32(w[g & 3], _mm_load_si128(reinterpret_cast<const __m128i*>(kK + 4 * g)));
    cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
    wk = _mm_shuffle_epi32(wk, 0x0E);
    abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);
  }
  *abef_io = _mm_add_epi32(abef, *abef_io);
  *cdgh_io = _mm_add_epi32(cdgh, *cdgh_io);
}

inline __m128i Load(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

void CompressBlocks(__m128i* abef, __m128i* cdgh, const uint8_t* blocks, size_t nblocks) {
  for (; nblocks > 0; --nblocks, blocks += kBlockBytes) {
    Rounds(abef, cdgh, Bswap32(Load(blocks)), Bswap32(Load(blocks + 16)),
           Bswap32(Load(blocks + 32)), Bswap32(Load(blocks + 48)));
  }
}

// state[0..7] (A..H) <-> ABEF / CDGH.
void ToShaNiLayout(const uint32_t state[8], __m128i* abef, __m128i* cdgh) {
  const __m128i dcba = _mm_shuffle_epi32(Load(reinterpret_cast<const uint8_t*>(state)), 0xB1);
  *cdgh = _mm_shuffle_epi32(Load(reinterpret_cast<const uint8_t*>(state + 4)), 0x1B);
  *abef = _mm_alignr_epi8(dcba, *cdgh, 8);
  *cdgh = _mm_blend_epi16(*cdgh, dcba, 0xF0);
}

// ABEF / CDGH -> (A, B, C, D) and (E, F, G, H) as 32-bit lanes.
void FromShaNiLayout(__m128i abef, __m128i cdgh, __m128i* abcd, __m128i* efgh) {
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  *abcd = _mm_blend_epi16(feba, dchg, 0xF0);
  *efgh = _mm_alignr_epi8(dchg, feba, 8);
}

}  // namespace

void CompressShaNi(uint32_t state[8], const uint8_t* blocks, size_t nblocks) {
  __m128i abef, cdgh;
  ToShaNiLayout(state, &abef, &cdgh);
  CompressBlocks(&abef, &cdgh, blocks, nblocks);
  __m128i abcd, efgh;
  FromShaNiLayout(abef, cdgh, &abcd, &efgh);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), abcd);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), efgh);
}

namespace {

// The digest of msg with bytes 3..34 replaced by (*p0, *p1), returned in (*p0, *p1) as digest
// bytes, all in registers.
inline void DigestPrefixRegs(const uint8_t* msg, size_t nblocks, __m128i* p0, __m128i* p1) {
  static constexpr uint32_t kIv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  __m128i abef, cdgh;
  ToShaNiLayout(kIv, &abef, &cdgh);
  // First block: msg[0..2], prefix[0..31], msg[35..63]. alignr(hi, lo, 13) = lo[13..15] hi[0..12].
  const __m128i b0 = _mm_alignr_epi8(*p0, _mm_slli_si128(Load(msg), 13), 13);
  const __m128i b1 = _mm_alignr_epi8(*p1, *p0, 13);
  const __m128i b2 = _mm_alignr_epi8(Load(msg + 35), *p1, 13);
  Rounds(&abef, &cdgh, Bswap32(b0), Bswap32(b1), Bswap32(b2), Bswap32(Load(msg + 48)));
  CompressBlocks(&abef, &cdgh, msg + kBlockBytes, nblocks - 1);
  __m128i abcd, efgh;
  FromShaNiLayout(abef, cdgh, &abcd, &efgh);
  *p0 = Bswap32(abcd);  // digest bytes are the big-endian state words
  *p1 = Bswap32(efgh);
}

}  // namespace

void DigestWithPrefix32(const uint8_t* msg, size_t nblocks, const uint8_t prefix[32],
                        uint8_t out[32]) {
  __m128i p0 = Load(prefix);
  __m128i p1 = Load(prefix + 16);
  DigestPrefixRegs(msg, nblocks, &p0, &p1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), p0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), p1);
}

void DigestChain(const uint8_t prefix[32], size_t count, BuildFn build, void* ctx,
                 uint8_t* const msg_bufs[2], uint8_t* out) {
  if (count == 0) return;
  __m128i p0 = Load(prefix);
  __m128i p1 = Load(prefix + 16);
  size_t nblocks = build(ctx, 0, msg_bufs[0]);
  for (size_t b = 0; b < count; ++b) {
    // Build the next message first (it does not depend on this digest), so the out-of-order core
    // overlaps its encoding with the latency-bound compressions below.
    const size_t next = b + 1 < count ? build(ctx, b + 1, msg_bufs[(b + 1) & 1]) : 0;
    DigestPrefixRegs(msg_bufs[b & 1], nblocks, &p0, &p1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 * b), p0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 * b + 16), p1);
    nblocks = next;
  }
}

#else

// Not built for x86-64 with SHA: HaveShaNi() is false there, so these are never reached.
void CompressShaNi(uint32_t*, const uint8_t*, size_t) { __builtin_trap(); }
void DigestWithPrefix32(const uint8_t*, size_t, const uint8_t*, uint8_t*) { __builtin_trap(); }
void DigestChain(const uint8_t*, size_t, BuildFn, void*, uint8_t* const*, uint8_t*) {
  __builtin_trap();
}

#endif

}  // namespace dualpath::kv::sha256
