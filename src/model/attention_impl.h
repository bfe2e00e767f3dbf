// The body of CausalAttention (attention.h) as a template over a kernel set K (a struct of static
// functions Dot, Dot4, Max, ExpShiftedSum (ExpShifted then Sum), Axpy, Axpy4 with the signatures of
// kernels.h), so the baseline and the AVX2 paths are one algorithm with the same loop and reduction
// order; only the vector width of the kernels differs (and they are bit-identical, kernels_avx2.h).
//
// Included by attention.cc (baseline) and by kernels_avx2.cc INSIDE its `#pragma GCC target`
// region, after every standard header, so the AVX2 instantiation is compiled for AVX2 and can
// inline the AVX2 kernels. Each instantiation lives in exactly one translation unit (the AVX2 one
// has an AVX2-only kernel type in its name), so no AVX2 code can be picked for a baseline symbol.
//
// Thread safety: pure function on caller memory.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/attention.h"

namespace dualpath::model::internal {

// Tokens per group: enough to amortize one pass over the KV, few enough that the group's scores
// (group x q_heads x context floats) stay in L2 at a few thousand tokens of context.
inline constexpr size_t kAttentionGroup = 16;

template <class K>
void CausalAttentionWith(const AttentionShape& s, uint64_t start, size_t n, const float* q,
                         size_t q_stride, const std::byte* kv, float* out,
                         std::vector<float>* scratch) {
  const size_t hd = s.head_dim;
  const size_t q_dim = s.q_heads * hd;
  const size_t kv_dim = s.kv_heads * hd;
  const size_t group = s.q_heads / s.kv_heads;
  const size_t bpt = s.kv_row_bytes;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));

  for (size_t t0 = 0; t0 < n; t0 += kAttentionGroup) {
    const size_t gn = t0 + kAttentionGroup < n ? kAttentionGroup : n - t0;
    const size_t ctx_max = start + t0 + gn;  // context of the group's last token
    const size_t rows = gn * s.q_heads;      // (token, head) pairs of the group
    scratch->resize(rows * ctx_max + gn * q_dim + rows);
    float* scores = scratch->data();  // [token][head][ctx_max]
    float* qs = scores + rows * ctx_max;
    float* inv_sum = qs + gn * q_dim;

    for (size_t t = 0; t < gn; ++t) {
      const float* src = q + (t0 + t) * q_stride;
      for (size_t i = 0; i < q_dim; ++i) qs[t * q_dim + i] = src[i] * scale;
    }

    // Scores, KV-row-major, four positions per pass where a token attends to all four (Dot4: the
    // query is loaded once; each score has the bits of a single Dot). Token t0 + t attends to j
    // iff j <= start + t0 + t.
    auto k_row = [&](size_t j) { return reinterpret_cast<const float*>(kv + j * bpt); };
    for (size_t j0 = 0; j0 < ctx_max; j0 += 4) {
      const size_t jn = j0 + 4 < ctx_max ? 4 : ctx_max - j0;
      const float* k[4] = {k_row(j0), k_row(j0 + (jn > 1)), k_row(j0 + 2 * (jn > 2)),
                           k_row(j0 + 3 * (jn > 3))};
      const size_t t_first = j0 > start + t0 ? j0 - start - t0 : 0;
      for (size_t t = t_first; t < gn; ++t) {
        const size_t ctx = start + t0 + t + 1;
        const size_t valid = ctx - j0 < jn ? ctx - j0 : jn;
        for (size_t h = 0; h < s.q_heads; ++h) {
          const float* qh = qs + t * q_dim + h * hd;
          float* sc = scores + (t * s.q_heads + h) * ctx_max + j0;
          const size_t off = (h / group) * hd;
          if (valid == 4) {
            const float* kh[4] = {k[0] + off, k[1] + off, k[2] + off, k[3] + off};
            K::Dot4(qh, kh, hd, sc);
          } else {
            for (size_t i = 0; i < valid; ++i) sc[i] = K::Dot(qh, k[i] + off, hd);
          }
        }
      }
    }

    // Softmax per (token, head), shifted by the max so exp never overflows.
    for (size_t t = 0; t < gn; ++t) {
      const size_t ctx = start + t0 + t + 1;
      for (size_t h = 0; h < s.q_heads; ++h) {
        float* sc = scores + (t * s.q_heads + h) * ctx_max;
        const float sum = K::ExpShiftedSum(sc, ctx, K::Max(sc, ctx));
        inv_sum[t * s.q_heads + h] = 1.0f / sum;
      }
    }

    // Weighted sum of V, KV-row-major again; each output accumulates j in increasing order.
    float* o = out + t0 * q_dim;
    for (size_t i = 0; i < gn * q_dim; ++i) o[i] = 0.0f;
    // Four positions per pass where a token attends to all four (Axpy4: y is loaded and stored
    // once, the additions are still one position after the other), single positions at the edge.
    auto v_row = [&](size_t j) { return reinterpret_cast<const float*>(kv + j * bpt) + kv_dim; };
    for (size_t j0 = 0; j0 < ctx_max; j0 += 4) {
      const size_t jn = j0 + 4 < ctx_max ? 4 : ctx_max - j0;
      const float* v[4] = {v_row(j0), v_row(j0 + (jn > 1)), v_row(j0 + 2 * (jn > 2)),
                           v_row(j0 + 3 * (jn > 3))};
      const size_t t_first = j0 > start + t0 ? j0 - start - t0 : 0;
      for (size_t t = t_first; t < gn; ++t) {
        const size_t ctx = start + t0 + t + 1;  // token t attends to j < ctx
        const size_t valid = ctx - j0 < jn ? ctx - j0 : jn;
        for (size_t h = 0; h < s.q_heads; ++h) {
          const float* w = scores + (t * s.q_heads + h) * ctx_max + j0;
          float* oh = o + t * q_dim + h * hd;
          const size_t off = (h / group) * hd;
          if (valid == 4) {
            K::Axpy4(w, v[0] + off, v[1] + off, v[2] + off, v[3] + off, oh, hd);
          } else {
            for (size_t k = 0; k < valid; ++k) K::Axpy(w[k], v[k] + off, oh, hd);
          }
        }
      }
    }
    for (size_t t = 0; t < gn; ++t) {
      for (size_t h = 0; h < s.q_heads; ++h) {
        const float inv = inv_sum[t * s.q_heads + h];
        float* oh = o + t * q_dim + h * hd;
        for (size_t d = 0; d < hd; ++d) oh[d] *= inv;
      }
    }
  }
}

}  // namespace dualpath::model::internal
