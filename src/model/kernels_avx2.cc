// The AVX2 KernelTable (kernel_table.h). Everything after the standard headers is compiled with
// `#pragma GCC target("avx2")` (kernels_avx2.h opens the region; the algorithm templates are
// included inside it so their AVX2 instantiations are AVX2 code and inline the AVX2 kernels).
// Functions defined before the region (the standard library's templates included) stay baseline
// code, so no AVX2 instruction can leak into a function a non-AVX2 CPU might run.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/attention.h"
#include "model/kernel_table.h"
#include "model/kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include "model/kernels_avx2.h"

// AVX2 code generation for what follows: GCC's target pragma, clang's attribute pragma (the
// fuzz preset builds with clang).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

#include "model/attention_impl.h"

namespace dualpath::model::internal {

namespace {

void CausalAttentionAvx2(const AttentionShape& s, uint64_t start, size_t n, const float* q,
                         size_t q_stride, const std::byte* kv, float* out,
                         std::vector<float>* scratch) {
  CausalAttentionWith<avx2::Ops>(s, start, n, q, q_stride, kv, out, scratch);
}

void MatVecAvx2(const float* w, size_t rows, size_t cols, const float* x, float* y) {
  avx2::MatVec(w, rows, cols, x, y);
}

void MatVecTokensAvx2(const float* w, size_t rows, size_t cols, const float* x, float* y,
                      size_t n) {
  avx2::MatVecTokens(w, rows, cols, x, y, n);
}

void RmsNormRowsAvx2(const float* x, const float* gain, size_t cols, size_t n, float* out) {
  for (size_t t = 0; t < n; ++t) avx2::RmsNorm(x + t * cols, gain, cols, out + t * cols);
}

void SwiGluRowsAvx2(const float* gate_up, size_t ffn, size_t n, float* act) {
  for (size_t t = 0; t < n; ++t) {
    const float* gu = gate_up + t * 2 * ffn;
    avx2::SwiGluRow(gu, gu + ffn, ffn, act + t * ffn);
  }
}

float DotAvx2(const float* a, const float* b, size_t n) { return avx2::Dot(a, b, n); }
void Dot4Avx2(const float* a, const float* const b[4], size_t n, float out[4]) {
  avx2::Dot4(a, b, n, out);
}
float SumAvx2(const float* x, size_t n) { return avx2::Sum(x, n); }
float MaxAvx2(const float* x, size_t n) { return avx2::Max(x, n); }
void ExpShiftedAvx2(float* x, size_t n, float shift) { avx2::ExpShifted(x, n, shift); }
void AxpyAvx2(float s, const float* x, float* y, size_t n) { avx2::Axpy(s, x, y, n); }
void Axpy4Avx2(const float* s, const float* x0, const float* x1, const float* x2, const float* x3,
               float* y, size_t n) {
  avx2::Axpy4(s, x0, x1, x2, x3, y, n);
}

constexpr KernelTable kAvx2 = {
    .isa = "avx2",
    .causal_attention = &CausalAttentionAvx2,
    .mat_vec = &MatVecAvx2,
    .mat_vec_tokens = &MatVecTokensAvx2,
    .rms_norm_rows = &RmsNormRowsAvx2,
    .swiglu_rows = &SwiGluRowsAvx2,
    .dot = &DotAvx2,
    .dot4 = &Dot4Avx2,
    .sum = &SumAvx2,
    .max = &MaxAvx2,
    .exp_shifted = &ExpShiftedAvx2,
    .axpy = &AxpyAvx2,
    .axpy4 = &Axpy4Avx2,
};

}  // namespace
}  // namespace dualpath::model::internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace dualpath::model::internal {
// Outside the AVX2 region: selection calls this on any CPU.
const KernelTable* Avx2Kernels() { return &kAvx2; }
}  // namespace dualpath::model::internal

#else  // no AVX2 path on this architecture

namespace dualpath::model::internal {
const KernelTable* Avx2Kernels() { return nullptr; }
}  // namespace dualpath::model::internal

#endif
