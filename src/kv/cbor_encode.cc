#include "kv/cbor_encode.h"

#include "dualpath/kv/cbor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dualpath::kv::cbor {

size_t EncodeUint32sScalar(const uint32_t* values, size_t n, uint8_t* out, uint32_t* or_all) {
  size_t len = 0;
  uint32_t acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc |= values[i];
    len += WriteUint32Branchless(values[i], out + len);
  }
  *or_all = acc;
  return len;
}

#if defined(__x86_64__)

// 8 values per step, each widened to a 64-bit lane holding its encoding in the lane's low bytes:
//   v < 24      [v]
//   v < 2^8     [0x18, v]
//   v < 2^16    [0x19, v >> 8, v]
//   otherwise   [0x1a, v >> 24, v >> 16, v >> 8, v]
// A byte mask keeps the first len bytes of each lane; vpcompressb packs them contiguously.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi2,popcnt"))) size_t
EncodeUint32sAvx512(const uint32_t* values, size_t n, uint8_t* out, uint32_t* or_all) {
  const __m512i k24 = _mm512_set1_epi64(24);
  const __m512i k256 = _mm512_set1_epi64(256);
  const __m512i k64k = _mm512_set1_epi64(65536);
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i two = _mm512_set1_epi64(2);
  const __m512i bytes_x8 = _mm512_set1_epi64(0x0101010101010101LL);
  // Byte index within each 64-bit lane: 0..7.
  const __m512i lane_idx = _mm512_set1_epi64(0x0706050403020100LL);
  // vpshufb patterns (per 128-bit lane, so qword 1 reads bytes 8..11). 0x80 = zero byte.
  const __m512i shuf5 = _mm512_set4_epi64(
      static_cast<int64_t>(0x80808008090A0B80ULL), static_cast<int64_t>(0x8080800001020380ULL),
      static_cast<int64_t>(0x80808008090A0B80ULL), static_cast<int64_t>(0x8080800001020380ULL));
  const __m512i shuf3 = _mm512_set4_epi64(
      static_cast<int64_t>(0x8080808080080980ULL), static_cast<int64_t>(0x8080808080000180ULL),
      static_cast<int64_t>(0x8080808080080980ULL), static_cast<int64_t>(0x8080808080000180ULL));
  const __m512i shuf2 = _mm512_set4_epi64(
      static_cast<int64_t>(0x8080808080800880ULL), static_cast<int64_t>(0x8080808080800080ULL),
      static_cast<int64_t>(0x8080808080800880ULL), static_cast<int64_t>(0x8080808080800080ULL));
  const __m512i head5 = _mm512_set1_epi64(0x1a);
  const __m512i head3 = _mm512_set1_epi64(0x19);
  const __m512i head2 = _mm512_set1_epi64(0x18);

  __m256i acc = _mm256_setzero_si256();
  size_t len = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v32 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + i));
    acc = _mm256_or_si256(acc, v32);
    // maskz form: the plain one trips GCC 12's -Wmaybe-uninitialized inside the intrinsic header.
    const __m512i v = _mm512_maskz_cvtepu32_epi64(0xFF, v32);
    const __mmask8 ge24 = _mm512_cmpge_epu64_mask(v, k24);
    const __mmask8 ge256 = _mm512_cmpge_epu64_mask(v, k256);
    const __mmask8 ge64k = _mm512_cmpge_epu64_mask(v, k64k);
    __m512i enc = v;  // v < 24: the value is the initial byte
    enc = _mm512_mask_mov_epi64(enc, ge24, _mm512_or_si512(_mm512_shuffle_epi8(v, shuf2), head2));
    enc = _mm512_mask_mov_epi64(enc, ge256, _mm512_or_si512(_mm512_shuffle_epi8(v, shuf3), head3));
    enc = _mm512_mask_mov_epi64(enc, ge64k, _mm512_or_si512(_mm512_shuffle_epi8(v, shuf5), head5));
    __m512i lens = one;
    lens = _mm512_mask_add_epi64(lens, ge24, lens, one);
    lens = _mm512_mask_add_epi64(lens, ge256, lens, one);
    lens = _mm512_mask_add_epi64(lens, ge64k, lens, two);
    const __m512i lens_bytes = _mm512_mullo_epi64(lens, bytes_x8);  // len in every byte
    const __mmask64 keep = _mm512_cmplt_epu8_mask(lane_idx, lens_bytes);
    _mm512_storeu_si512(out + len, _mm512_maskz_compress_epi8(keep, enc));
    len += static_cast<size_t>(__builtin_popcountll(keep));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  uint32_t tail_or = 0;
  len += EncodeUint32sScalar(values + i, n - i, out + len, &tail_or);
  for (uint32_t l : lanes) tail_or |= l;
  *or_all = tail_or;
  return len;
}

bool HaveAvx512Encoder() {
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vbmi2");
  return have;
}

#else

size_t EncodeUint32sAvx512(const uint32_t* values, size_t n, uint8_t* out, uint32_t* or_all) {
  return EncodeUint32sScalar(values, n, out, or_all);
}
bool HaveAvx512Encoder() { return false; }

#endif

size_t EncodeUint32s(const uint32_t* values, size_t n, uint8_t* out, uint32_t* or_all) {
  return HaveAvx512Encoder() ? EncodeUint32sAvx512(values, n, out, or_all)
                             : EncodeUint32sScalar(values, n, out, or_all);
}

}  // namespace dualpath::kv::cbor
