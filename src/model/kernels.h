// Numeric kernels of the reference model (private to src/model).
//
// Every reduction here has a FIXED order that depends only on its length, never on how many tokens
// the caller processes at once or where they start: that is what makes ForwardLayer chunking
// invariant (ref_model.h). Dot products use 8 independent lanes held in two SSE-sized GCC vectors
// (lane k accumulates elements i with i % 8 == k, in increasing i), combined as
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). Explicit vectors instead of relying on the
// auto-vectorizer: the order is the same whether or not the compiler vectorizes, at -O1 (dev,
// debug) and -O2 (release) alike, and no -ffast-math is needed. The component is compiled with
// -ffp-contract=off so no multiply-add is fused differently in two inlined copies.
//
// These are the baseline (SSE, any x86-64) kernels; kernels_avx2.h has the same kernels with one
// 8-wide AVX2 vector holding the 8 lanes, bit-identical, and kernel_table.h picks one set per
// process at run time. A change to an order here must be made there too (kernels_avx2_test.cc
// compares the two with memcmp).
//
// Loads and stores go through memcpy: KV bytes come from engine buffers (std::byte spans), and
// memcpy is the aliasing- and alignment-safe way to read floats from them; GCC turns it into
// movups.
//
// Thread safety: pure functions on caller memory.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dualpath::model::internal {

// 16-byte vectors only: 32-byte GCC vectors would change the calling convention without AVX
// (-Wpsabi) and the build targets baseline x86-64 (the AVX2 path is kernels_avx2.h).
typedef float V4 __attribute__((vector_size(16)));

inline V4 Load4(const void* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store4(void* p, V4 v) { std::memcpy(p, &v, sizeof(v)); }
inline float LoadF(const void* p) {
  float f;
  std::memcpy(&f, p, sizeof(f));
  return f;
}
inline V4 Splat4(float f) { return V4{f, f, f, f}; }

// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) of the lanes lo = (l0..l3), hi = (l4..l7), with shuffles
// instead of a store and seven scalar adds; the additions are exactly those of the formula.
inline float SumLanes(V4 lo, V4 hi) {
  // __builtin_shufflevector: GCC (12+) and clang (the fuzz preset) both have it.
  const V4 pairs = __builtin_shufflevector(lo, hi, 0, 2, 4, 6) +
                   __builtin_shufflevector(lo, hi, 1, 3, 5, 7);  // (l0+l1, l2+l3, l4+l5, l6+l7)
  const V4 quads = __builtin_shufflevector(pairs, pairs, 0, 2, 0, 2) +
                   __builtin_shufflevector(pairs, pairs, 1, 3, 1, 3);
  return quads[0] + quads[1];
}

// Sum of a[i] * b[i] for i < n in the fixed 8-lane order described above.
inline float Dot(const float* a, const float* b, size_t n) {
  V4 lo = {0, 0, 0, 0};
  V4 hi = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += Load4(a + i) * Load4(b + i);
    hi += Load4(a + i + 4) * Load4(b + i + 4);
  }
  if (i < n) {  // tail: element i still goes to lane i % 8
    float lanes[8];
    std::memcpy(lanes, &lo, sizeof(lo));
    std::memcpy(lanes + 4, &hi, sizeof(hi));
    for (; i < n; ++i) lanes[i & 7] += LoadF(a + i) * LoadF(b + i);
    lo = Load4(lanes);
    hi = Load4(lanes + 4);
  }
  return SumLanes(lo, hi);
}

// out[k] = Dot(a, b[k], n) for k < 4, with the bits of four Dot calls: `a` is loaded once for
// four rows (the attention scores of one query against four positions).
[[gnu::always_inline]] inline void Dot4(const float* a, const float* const b[4], size_t n,
                                        float out[4]) {
  if (n % 8 != 0) {
    for (int k = 0; k < 4; ++k) out[k] = Dot(a, b[k], n);
    return;
  }
  V4 lo0 = {0, 0, 0, 0}, hi0 = lo0, lo1 = lo0, hi1 = lo0, lo2 = lo0, hi2 = lo0, lo3 = lo0,
     hi3 = lo0;
  for (size_t i = 0; i < n; i += 8) {
    const V4 al = Load4(a + i);
    const V4 ah = Load4(a + i + 4);
    lo0 += al * Load4(b[0] + i);
    hi0 += ah * Load4(b[0] + i + 4);
    lo1 += al * Load4(b[1] + i);
    hi1 += ah * Load4(b[1] + i + 4);
    lo2 += al * Load4(b[2] + i);
    hi2 += ah * Load4(b[2] + i + 4);
    lo3 += al * Load4(b[3] + i);
    hi3 += ah * Load4(b[3] + i + 4);
  }
  out[0] = SumLanes(lo0, hi0);
  out[1] = SumLanes(lo1, hi1);
  out[2] = SumLanes(lo2, hi2);
  out[3] = SumLanes(lo3, hi3);
}

// Sum of x[i] for i < n in the same 8-lane order as Dot.
inline float Sum(const float* x, size_t n) {
  V4 lo = {0, 0, 0, 0};
  V4 hi = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += Load4(x + i);
    hi += Load4(x + i + 4);
  }
  if (i < n) {
    float lanes[8];
    std::memcpy(lanes, &lo, sizeof(lo));
    std::memcpy(lanes + 4, &hi, sizeof(hi));
    for (; i < n; ++i) lanes[i & 7] += LoadF(x + i);
    lo = Load4(lanes);
    hi = Load4(lanes + 4);
  }
  return SumLanes(lo, hi);
}

// exp(x) for 4 floats, from IEEE basic operations only (Cephes expf: Cody-Waite reduction
// x = n ln2 + r, a degree-7 polynomial in r, then 2^n built in the exponent bits). Not libm's
// expf on purpose: glibc picks an expf implementation per CPU at load time (__expf_fma on
// machines with FMA), so libm results may differ between two hosts running the same binary,
// while this is the same everywhere; it is also vectorizable without -ffast-math. Relative error
// < 2e-7 (tested against std::exp; measured 7.7e-8). Inputs are clamped to [-87, 88]: exp(-87)
// ~ 1.6e-38 is still a normal float, and the model never needs larger values.
inline V4 Exp4(V4 x) {
  typedef int32_t I4 __attribute__((vector_size(16)));
  const V4 lo_clamp = Splat4(-87.0f);
  const V4 hi_clamp = Splat4(88.0f);
  x = x < lo_clamp ? lo_clamp : x;
  x = x > hi_clamp ? hi_clamp : x;
  // n = floor(x * log2(e) + 0.5): truncate, then step down where truncation rounded up.
  const V4 fx = x * Splat4(1.44269504088896341f) + Splat4(0.5f);
  V4 n = __builtin_convertvector(__builtin_convertvector(fx, I4), V4);
  n -= __builtin_convertvector((n > fx) & I4{1, 1, 1, 1}, V4);
  // r = x - n ln2, in two steps: 0.693359375 has few bits, so n * it is exact.
  V4 r = x - n * Splat4(0.693359375f);
  r = r - n * Splat4(-2.12194440e-4f);
  V4 p = Splat4(1.9875691500e-4f);
  p = p * r + Splat4(1.3981999507e-3f);
  p = p * r + Splat4(8.3334519073e-3f);
  p = p * r + Splat4(4.1665795894e-2f);
  p = p * r + Splat4(1.6666665459e-1f);
  p = p * r + Splat4(5.0000001201e-1f);
  p = p * (r * r) + r + Splat4(1.0f);
  // 2^n: n in [-126, 127] after the clamp, a normal float.
  const I4 bits = (__builtin_convertvector(n, I4) + I4{127, 127, 127, 127}) << 23;
  V4 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// The scalar form: lane 0 of Exp4, so scalar and vector paths give the same bits.
inline float Exp(float x) { return Exp4(Splat4(x))[0]; }

// x[i] = Exp(x[i] - shift) for i < n.
inline void ExpShifted(float* x, size_t n, float shift) {
  const V4 sv = Splat4(shift);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) Store4(x + i, Exp4(Load4(x + i) - sv));
  for (; i < n; ++i) x[i] = Exp(x[i] - shift);
}

// y[i] += s * x[i] for i < n (elementwise: no reduction, so vector width cannot change results).
inline void Axpy(float s, const float* x, float* y, size_t n) {
  const V4 sv = Splat4(s);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) Store4(y + i, Load4(y + i) + sv * Load4(x + i));
  for (; i < n; ++i) y[i] += s * LoadF(x + i);
}

// y[i] = (((y[i] + s0 * x0[i]) + s1 * x1[i]) + s2 * x2[i]) + s3 * x3[i]: four Axpy calls in
// sequence, with the same additions in the same order per element, but y loaded and stored once.
inline void Axpy4(const float* s, const float* x0, const float* x1, const float* x2,
                  const float* x3, float* y, size_t n) {
  const V4 s0 = Splat4(s[0]), s1 = Splat4(s[1]), s2 = Splat4(s[2]), s3 = Splat4(s[3]);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    V4 acc = Load4(y + i);
    acc += s0 * Load4(x0 + i);
    acc += s1 * Load4(x1 + i);
    acc += s2 * Load4(x2 + i);
    acc += s3 * Load4(x3 + i);
    Store4(y + i, acc);
  }
  for (; i < n; ++i) {
    float acc = y[i];
    acc += s[0] * LoadF(x0 + i);
    acc += s[1] * LoadF(x1 + i);
    acc += s[2] * LoadF(x2 + i);
    acc += s[3] * LoadF(x3 + i);
    y[i] = acc;
  }
}

// max of x[i], i < n (n >= 1). Max is exact, so the lane order cannot change the value; the only
// order-dependent case (the sign of a zero maximum) does not change exp(s - max).
inline float Max(const float* x, size_t n) {
  size_t i = 0;
  float m = x[0];
  if (n >= 4) {
    V4 mv = Load4(x);
    for (i = 4; i + 4 <= n; i += 4) {
      const V4 v = Load4(x + i);
      mv = v > mv ? v : mv;
    }
    m = mv[0];
    for (int k = 1; k < 4; ++k) m = mv[k] > m ? mv[k] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// y[r] = Dot(w + r * cols, x, cols) for r < rows: a [rows][cols] row-major matrix times a vector.
inline void MatVec(const float* w, size_t rows, size_t cols, const float* x, float* y) {
  for (size_t r = 0; r < rows; ++r) y[r] = Dot(w + r * cols, x, cols);
}

// The same for `n` token rows x[t * cols ...] → y[t * rows ...]. Tokens are processed in groups so
// the group's inputs stay in L1 while the weights stream from L2, and four weight rows at a time
// share each load of the token (Dot4; a * b == b * a exactly in IEEE arithmetic, so
// Dot4(x, rows) has the bits of Dot(row, x)). Each output is still exactly Dot(row, token): the
// grouping changes the loop order, not any reduction.
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

inline constexpr float kRmsEps = 1e-5f;

// out[i] = (x[i] * inv_rms) * gain[i], inv_rms = 1 / sqrt(mean(x^2) + eps).
inline void RmsNorm(const float* x, const float* gain, size_t n, float* out) {
  const float mean_sq = Dot(x, x, n) / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(mean_sq + kRmsEps);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] * inv) * gain[i];
}

// SiLU(g) * u, SiLU(g) = g / (1 + exp(-g)).
inline float SwiGlu(float g, float u) { return g / (1.0f + Exp(-g)) * u; }

// out[i] = SwiGlu(gate[i], up[i]) for i < n, four at a time (each element alone: same bits).
inline void SwiGluRow(const float* gate, const float* up, size_t n, float* out) {
  const V4 one = Splat4(1.0f);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const V4 g = Load4(gate + i);
    Store4(out + i, g / (one + Exp4(-g)) * Load4(up + i));
  }
  for (; i < n; ++i) out[i] = SwiGlu(gate[i], up[i]);
}

// The kernels above as a kernel set for the algorithm templates (attention_impl.h); kernels_avx2.h
// has the same struct (avx2::Ops) over its AVX2 kernels.
struct BaselineOps {
  static float Dot(const float* a, const float* b, size_t n) { return internal::Dot(a, b, n); }
  [[gnu::always_inline]] static void Dot4(const float* a, const float* const b[4], size_t n,
                                          float out[4]) {
    internal::Dot4(a, b, n, out);
  }
  static float Sum(const float* x, size_t n) { return internal::Sum(x, n); }
  static float Max(const float* x, size_t n) { return internal::Max(x, n); }
  // The baseline keeps its two passes (the AVX2 set fuses them, same bits).
  static float ExpShiftedSum(float* x, size_t n, float shift) {
    internal::ExpShifted(x, n, shift);
    return internal::Sum(x, n);
  }
  static void Axpy(float s, const float* x, float* y, size_t n) { internal::Axpy(s, x, y, n); }
  static void Axpy4(const float* s, const float* x0, const float* x1, const float* x2,
                    const float* x3, float* y, size_t n) {
    internal::Axpy4(s, x0, x1, x2, x3, y, n);
  }
};

}  // namespace dualpath::model::internal
