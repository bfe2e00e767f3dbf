// Causal GQA attention of a chunk of new tokens over one layer's KV (private to src/model).
//
// Per (token, query head) the arithmetic is fixed: score_j = Dot(q * 1/sqrt(head_dim), K_j) for
// j = 0 .. pos in the 8-lane order of kernels.h; weights e_j = exp(score_j - max) summed into 8
// lanes by j % 8; out = (sum over j in increasing order of e_j * V_j) * (1 / sum). Only the loop
// ORDER across tokens and heads is blocked for memory locality: tokens are taken in groups, and
// within a group each KV row is read once for every (token, head) that attends to it, so a
// 32-token chunk over 2K cached tokens streams the 2 MB layer KV once per group instead of once
// per token per head. No reduction crosses tokens, so the result of a token does not depend on
// which group, chunk or call it is in.
//
// Thread safety: pure function on caller memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dualpath::model::internal {

struct AttentionShape {
  size_t q_heads = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  size_t kv_row_bytes = 0;  // bytes per position: K of all KV heads, then V of all KV heads
};

// For the n tokens at positions [start, start + n): q rows at q + t * q_stride (q_heads x
// head_dim floats, rotary applied), KV of positions [0, start + n) at kv, output rows at
// out + t * q_heads * head_dim. `scratch` is reused between calls to avoid reallocations.
void CausalAttention(const AttentionShape& shape, uint64_t start, size_t n, const float* q,
                     size_t q_stride, const std::byte* kv, float* out, std::vector<float>* scratch);

}  // namespace dualpath::model::internal
