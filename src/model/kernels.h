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
// (-Wpsabi) and the build targets baseline x86-64.
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

// Sum of a[i] * b[i] for i < n in the fixed 8-lane order described above.
inline float Dot(const float* a, const float* b, size_t n) {
  V4 lo = {0, 0, 0, 0};
  V4 hi = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += Load4(a + i) * Load4(b + i);
    hi += Load4(a + i + 4) * Load4(b + i + 4);
  }
  float lanes[8];
  std::memcpy(lanes, &lo, sizeof(lo));
  std::memcpy(lanes + 4, &hi, sizeof(hi));
  for (; i < n; ++i) lanes[i & 7] += LoadF(a + i) * LoadF(b + i);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// y[i] += s * x[i] for i < n (elementwise: no reduction, so vector width cannot change results).
inline void Axpy(float s, const float* x, float* y, size_t n) {
  const V4 sv = Splat4(s);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) Store4(y + i, Load4(y + i) + sv * Load4(x + i));
  for (; i < n; ++i) y[i] += s * LoadF(x + i);
}

// y[r] = Dot(w + r * cols, x, cols) for r < rows: a [rows][cols] row-major matrix times a vector.
inline void MatVec(const float* w, size_t rows, size_t cols, const float* x, float* y) {
  for (size_t r = 0; r < rows; ++r) y[r] = Dot(w + r * cols, x, cols);
}

// The same for `n` token rows x[t * cols ...] → y[t * rows ...]. Tokens are processed in groups so
// the group's inputs stay in L1 while the weights stream from L2; each output is still exactly
// Dot(row, token) — the grouping changes the loop order, not any reduction.
inline void MatVecTokens(const float* w, size_t rows, size_t cols, const float* x, float* y,
                         size_t n) {
  constexpr size_t kGroup = 8;
  for (size_t t0 = 0; t0 < n; t0 += kGroup) {
    const size_t t1 = t0 + kGroup < n ? t0 + kGroup : n;
    for (size_t r = 0; r < rows; ++r) {
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
inline float SwiGlu(float g, float u) { return g / (1.0f + std::exp(-g)) * u; }

}  // namespace dualpath::model::internal
