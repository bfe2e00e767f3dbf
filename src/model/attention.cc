#include "model/attention.h"

#include <cmath>

#include "model/kernels.h"

namespace dualpath::model::internal {

namespace {
// Tokens per group: enough to amortize one pass over the KV, few enough that the group's scores
// (kGroup x q_heads x context floats) stay in L2 at a few thousand tokens of context.
constexpr size_t kGroup = 16;
}  // namespace

void CausalAttention(const AttentionShape& s, uint64_t start, size_t n, const float* q,
                     size_t q_stride, const std::byte* kv, float* out,
                     std::vector<float>* scratch) {
  const size_t hd = s.head_dim;
  const size_t q_dim = s.q_heads * hd;
  const size_t kv_dim = s.kv_heads * hd;
  const size_t group = s.q_heads / s.kv_heads;
  const size_t bpt = s.kv_row_bytes;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));

  for (size_t t0 = 0; t0 < n; t0 += kGroup) {
    const size_t gn = t0 + kGroup < n ? kGroup : n - t0;
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

    // Scores, KV-row-major: token t0 + t attends to j iff j <= start + t0 + t.
    for (size_t j = 0; j < ctx_max; ++j) {
      const float* k_row = reinterpret_cast<const float*>(kv + j * bpt);
      const size_t t_first = j > start + t0 ? j - start - t0 : 0;
      for (size_t t = t_first; t < gn; ++t) {
        for (size_t h = 0; h < s.q_heads; ++h) {
          scores[(t * s.q_heads + h) * ctx_max + j] =
              Dot(qs + t * q_dim + h * hd, k_row + (h / group) * hd, hd);
        }
      }
    }

    // Softmax per (token, head), shifted by the max so exp never overflows.
    for (size_t t = 0; t < gn; ++t) {
      const size_t ctx = start + t0 + t + 1;
      for (size_t h = 0; h < s.q_heads; ++h) {
        float* sc = scores + (t * s.q_heads + h) * ctx_max;
        float max_s = -INFINITY;
        for (size_t j = 0; j < ctx; ++j) max_s = sc[j] > max_s ? sc[j] : max_s;
        ExpShifted(sc, ctx, max_s);
        const float sum = Sum(sc, ctx);
        inv_sum[t * s.q_heads + h] = 1.0f / sum;
      }
    }

    // Weighted sum of V, KV-row-major again; each output accumulates j in increasing order.
    float* o = out + t0 * q_dim;
    for (size_t i = 0; i < gn * q_dim; ++i) o[i] = 0.0f;
    for (size_t j = 0; j < ctx_max; ++j) {
      const float* v_row = reinterpret_cast<const float*>(kv + j * bpt) + kv_dim;
      const size_t t_first = j > start + t0 ? j - start - t0 : 0;
      for (size_t t = t_first; t < gn; ++t) {
        for (size_t h = 0; h < s.q_heads; ++h) {
          Axpy(scores[(t * s.q_heads + h) * ctx_max + j], v_row + (h / group) * hd,
               o + t * q_dim + h * hd, hd);
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
