// The kernels of kernels.h with 8-wide AVX2 vectors (private to src/model; included ONLY by
// kernels_avx2.cc, after all standard headers it needs).
//
// Bit identity with the baseline (SSE) kernels is by construction, not by tolerance: the 8 lanes
// of kernels.h (lane k accumulates the elements i with i % 8 == k, in increasing i) are the 8
// lanes of one 256-bit vector here, every lane performs the same IEEE operations in the same
// order, and the final combination ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) is done with horizontal
// adds that perform exactly those additions (a + b == b + a bitwise in IEEE arithmetic).
// Elementwise kernels (Exp, Axpy, SwiGLU) compute each element with the same operations whatever
// the vector width. No fused multiply-add: `target("avx2")` does not enable FMA, and the component
// is built with -ffp-contract=off.
//
// Every function here is compiled for AVX2 through the pragma below; callers must check that the
// CPU supports AVX2 first (KernelTable selection, kernel_table.h). The 32-byte vectors never cross
// a function compiled without AVX (that would be an ABI change, -Wpsabi): entry points take
// pointers.
//
// Thread safety: pure functions on caller memory.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "model/kernels.h"

// AVX2 code generation for what follows: GCC's target pragma, clang's attribute pragma (the
// fuzz preset builds with clang).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace dualpath::model::internal::avx2 {

typedef float V8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

inline V8 Load8(const void* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store8(void* p, V8 v) { std::memcpy(p, &v, sizeof(v)); }
inline float LoadF(const void* p) {
  float f;
  std::memcpy(&f, p, sizeof(f));
  return f;
}
inline V8 Splat8(float f) { return V8{f, f, f, f, f, f, f, f}; }

// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)): hadd(lo, hi) = (l0+l1, l2+l3, l4+l5, l6+l7), hadd again
// gives (p0+p1, p2+p3, ..), and the last add joins the two halves.
inline float SumLanes(V8 v) {
  const __m256 m = reinterpret_cast<__m256>(v);
  const __m128 pairs = _mm_hadd_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  const __m128 quads = _mm_hadd_ps(pairs, pairs);
  return _mm_cvtss_f32(quads) + _mm_cvtss_f32(_mm_shuffle_ps(quads, quads, 1));
}

// Tail of a reduction: element i still goes to lane i % 8 (as kernels.h).
inline V8 AddTail(V8 acc, const float* a, const float* b, size_t i, size_t n) {
  float lanes[8];
  std::memcpy(lanes, &acc, sizeof(acc));
  if (b != nullptr) {
    for (; i < n; ++i) lanes[i & 7] += LoadF(a + i) * LoadF(b + i);
  } else {
    for (; i < n; ++i) lanes[i & 7] += LoadF(a + i);
  }
  return Load8(lanes);
}

inline float Dot(const float* a, const float* b, size_t n) {
  V8 acc = Splat8(0.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) acc += Load8(a + i) * Load8(b + i);
  if (i < n) acc = AddTail(acc, a, b, i, n);
  return SumLanes(acc);
}

// Four Dot(a, b[k], n) with `a` loaded once; the four lane combinations are done together: with
// P01 = hadd(acc0, acc1), P23 = hadd(acc2, acc3), Q = hadd(P01, P23), the low half of Q holds
// (l0+l1)+(l2+l3) of each accumulator and the high half (l4+l5)+(l6+l7); one add finishes all four.
// kN > 0: n == kN known at compile time (the loop is unrolled into registers).
template <size_t kN = 0>
[[gnu::always_inline]] inline void Dot4(const float* a, const float* const b[4], size_t n,
                                        float out[4]) {
  if (kN == 0 && n % 8 != 0) {
    for (int k = 0; k < 4; ++k) out[k] = Dot(a, b[k], n);
    return;
  }
  if (kN != 0) n = kN;
  V8 acc0 = Splat8(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  for (size_t i = 0; i < n; i += 8) {
    const V8 av = Load8(a + i);
    acc0 += av * Load8(b[0] + i);
    acc1 += av * Load8(b[1] + i);
    acc2 += av * Load8(b[2] + i);
    acc3 += av * Load8(b[3] + i);
  }
  const __m256 p01 = _mm256_hadd_ps(reinterpret_cast<__m256>(acc0), reinterpret_cast<__m256>(acc1));
  const __m256 p23 = _mm256_hadd_ps(reinterpret_cast<__m256>(acc2), reinterpret_cast<__m256>(acc3));
  const __m256 q = _mm256_hadd_ps(p01, p23);
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}

inline float Sum(const float* x, size_t n) {
  V8 acc = Splat8(0.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) acc += Load8(x + i);
  if (i < n) acc = AddTail(acc, x, nullptr, i, n);
  return SumLanes(acc);
}

// Exp4 of kernels.h, lane for lane (same constants, same operations, same order).
inline V8 Exp8(V8 x) {
  const V8 lo_clamp = Splat8(-87.0f);
  const V8 hi_clamp = Splat8(88.0f);
  x = x < lo_clamp ? lo_clamp : x;
  x = x > hi_clamp ? hi_clamp : x;
  const V8 fx = x * Splat8(1.44269504088896341f) + Splat8(0.5f);
  V8 n = __builtin_convertvector(__builtin_convertvector(fx, I8), V8);
  n -= __builtin_convertvector((n > fx) & I8{1, 1, 1, 1, 1, 1, 1, 1}, V8);
  V8 r = x - n * Splat8(0.693359375f);
  r = r - n * Splat8(-2.12194440e-4f);
  V8 p = Splat8(1.9875691500e-4f);
  p = p * r + Splat8(1.3981999507e-3f);
  p = p * r + Splat8(8.3334519073e-3f);
  p = p * r + Splat8(4.1665795894e-2f);
  p = p * r + Splat8(1.6666665459e-1f);
  p = p * r + Splat8(5.0000001201e-1f);
  p = p * (r * r) + r + Splat8(1.0f);
  const I8 bits = (__builtin_convertvector(n, I8) + 127) << 23;
  V8 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// x[i] = Exp(x[i] - shift). Every element is computed alone (lanes are independent), so the tail
// goes through one padded vector.
inline void ExpShifted(float* x, size_t n, float shift) {
  const V8 sv = Splat8(shift);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(x + i, Exp8(Load8(x + i) - sv));
  if (i < n) {
    float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(buf, x + i, (n - i) * sizeof(float));
    Store8(buf, Exp8(Load8(buf) - sv));
    std::memcpy(x + i, buf, (n - i) * sizeof(float));
  }
}

// ExpShifted(x, n, shift) then Sum(x, n) in one pass: the exponentials are stored and added to
// the 8 lanes in the order Sum would add them (element i into lane i % 8, increasing i).
inline float ExpShiftedSum(float* x, size_t n, float shift) {
  const V8 sv = Splat8(shift);
  V8 acc = Splat8(0.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 e = Exp8(Load8(x + i) - sv);
    Store8(x + i, e);
    acc += e;
  }
  if (i < n) {
    ExpShifted(x + i, n - i, shift);
    acc = AddTail(acc, x, nullptr, i, n);
  }
  return SumLanes(acc);
}

inline void Axpy(float s, const float* x, float* y, size_t n) {
  const V8 sv = Splat8(s);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(y + i, Load8(y + i) + sv * Load8(x + i));
  for (; i < n; ++i) y[i] += s * LoadF(x + i);
}

template <size_t kN = 0>
[[gnu::always_inline]] inline void Axpy4(const float* s, const float* x0, const float* x1,
                                         const float* x2, const float* x3, float* y, size_t n) {
  if (kN != 0) n = kN;
  const V8 s0 = Splat8(s[0]), s1 = Splat8(s[1]), s2 = Splat8(s[2]), s3 = Splat8(s[3]);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    V8 acc = Load8(y + i);
    acc += s0 * Load8(x0 + i);
    acc += s1 * Load8(x1 + i);
    acc += s2 * Load8(x2 + i);
    acc += s3 * Load8(x3 + i);
    Store8(y + i, acc);
  }
  if constexpr (kN % 8 == 0 && kN != 0) return;  // no tail
  for (; i < n; ++i) {
    float acc = y[i];
    acc += s[0] * LoadF(x0 + i);
    acc += s[1] * LoadF(x1 + i);
    acc += s[2] * LoadF(x2 + i);
    acc += s[3] * LoadF(x3 + i);
    y[i] = acc;
  }
}

// The maximum VALUE (exact whatever the order). Only the sign of a zero maximum can differ from
// the baseline's (-0.0 == 0.0 ties are kept in a different order), and Exp(s - max) is the same
// for either sign (Exp(-0.0) == Exp(0.0) == 1, tested), so attention outputs stay bit-identical.
inline float Max(const float* x, size_t n) {
  size_t i = 0;
  float m = x[0];
  if (n >= 8) {
    V8 mv = Load8(x);
    for (i = 8; i + 8 <= n; i += 8) {
      const V8 v = Load8(x + i);
      mv = v > mv ? v : mv;
    }
    m = mv[0];
    for (int k = 1; k < 8; ++k) m = mv[k] > m ? mv[k] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

inline void MatVec(const float* w, size_t rows, size_t cols, const float* x, float* y) {
  for (size_t r = 0; r < rows; ++r) y[r] = Dot(w + r * cols, x, cols);
}

// The loop structure of kernels.h's MatVecTokens (token groups of 8, four weight rows per pass).
inline void MatVecTokens(const float* w, size_t rows, size_t cols, const float* x, float* y,
                         size_t n) {
  constexpr size_t kGroup = 8;
  for (size_t t0 = 0; t0 < n; t0 += kGroup) {
    const size_t t1 = t0 + kGroup < n ? t0 + kGroup : n;
    size_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      const float* four[4] = {w + r * cols, w + (r + 1) * cols, w + (r + 2) * cols,
                              w + (r + 3) * cols};
      for (size_t t = t0; t < t1; ++t) Dot4(x + t * cols, four, cols, y + t * rows + r);
    }
    for (; r < rows; ++r) {
      const float* row = w + r * cols;
      for (size_t t = t0; t < t1; ++t) y[t * rows + r] = Dot(row, x + t * cols, cols);
    }
  }
}

inline void RmsNorm(const float* x, const float* gain, size_t n, float* out) {
  const float mean_sq = Dot(x, x, n) / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(mean_sq + kRmsEps);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] * inv) * gain[i];
}

// out[f] = SwiGlu(gate[f], up[f]) = gate / (1 + Exp(-gate)) * up, 8 elements at a time.
inline void SwiGluRow(const float* gate, const float* up, size_t n, float* out) {
  const V8 one = Splat8(1.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 g = Load8(gate + i);
    Store8(out + i, g / (one + Exp8(-g)) * Load8(up + i));
  }
  if (i < n) {
    float g[8] = {0, 0, 0, 0, 0, 0, 0, 0}, u[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(g, gate + i, (n - i) * sizeof(float));
    std::memcpy(u, up + i, (n - i) * sizeof(float));
    const V8 gv = Load8(g);
    Store8(g, gv / (one + Exp8(-gv)) * Load8(u));
    std::memcpy(out + i, g, (n - i) * sizeof(float));
  }
}

// The AVX2 kernel set for the algorithm templates (attention_impl.h), as BaselineOps.
struct Ops {
  static float Dot(const float* a, const float* b, size_t n) { return avx2::Dot(a, b, n); }
  // The default head_dim (32) gets loops unrolled for it: same operations, same order.
  [[gnu::always_inline]] static void Dot4(const float* a, const float* const b[4], size_t n,
                                          float out[4]) {
    if (n == 32) {
      avx2::Dot4<32>(a, b, n, out);
    } else {
      avx2::Dot4(a, b, n, out);
    }
  }
  static float Sum(const float* x, size_t n) { return avx2::Sum(x, n); }
  static float Max(const float* x, size_t n) { return avx2::Max(x, n); }
  static float ExpShiftedSum(float* x, size_t n, float shift) {
    return avx2::ExpShiftedSum(x, n, shift);
  }
  static void Axpy(float s, const float* x, float* y, size_t n) { avx2::Axpy(s, x, y, n); }
  static void Axpy4(const float* s, const float* x0, const float* x1, const float* x2,
                    const float* x3, float* y, size_t n) {
    if (n == 32) {
      avx2::Axpy4<32>(s, x0, x1, x2, x3, y, n);
    } else {
      avx2::Axpy4(s, x0, x1, x2, x3, y, n);
    }
  }
};

}  // namespace dualpath::model::internal::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
