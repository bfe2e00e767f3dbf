// The baseline (SSE) instantiation of the attention algorithm (attention_impl.h); the AVX2 one is
// in kernels_avx2.cc.
#include "model/attention.h"

#include "model/attention_impl.h"
#include "model/kernels.h"

namespace dualpath::model::internal {

void CausalAttention(const AttentionShape& s, uint64_t start, size_t n, const float* q,
                     size_t q_stride, const std::byte* kv, float* out,
                     std::vector<float>* scratch) {
  CausalAttentionWith<BaselineOps>(s, start, n, q, q_stride, kv, out, scratch);
}

}  // namespace dualpath::model::internal
