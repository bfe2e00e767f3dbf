// The baseline KernelTable and the selection of a table (kernel_table.h).
#include "model/kernel_table.h"

#include <cstdlib>
#include <string>

#include "model/attention.h"
#include "model/kernels.h"

namespace dualpath::model::internal {

namespace {

void RmsNormRows(const float* x, const float* gain, size_t cols, size_t n, float* out) {
  for (size_t t = 0; t < n; ++t) RmsNorm(x + t * cols, gain, cols, out + t * cols);
}

void SwiGluRows(const float* gate_up, size_t ffn, size_t n, float* act) {
  for (size_t t = 0; t < n; ++t) {
    const float* gu = gate_up + t * 2 * ffn;
    SwiGluRow(gu, gu + ffn, ffn, act + t * ffn);
  }
}

void Dot4Fn(const float* a, const float* const b[4], size_t n, float out[4]) { Dot4(a, b, n, out); }

constexpr KernelTable kBaseline = {
    .isa = "baseline",
    .causal_attention = &CausalAttention,
    .mat_vec = &MatVec,
    .mat_vec_tokens = &MatVecTokens,
    .rms_norm_rows = &RmsNormRows,
    .swiglu_rows = &SwiGluRows,
    .dot = &Dot,
    .dot4 = &Dot4Fn,
    .sum = &Sum,
    .max = &Max,
    .exp_shifted = &ExpShifted,
    .axpy = &Axpy,
    .axpy4 = &Axpy4,
};

}  // namespace

const KernelTable& BaselineKernels() { return kBaseline; }

bool CpuHasAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  // Checks the CPUID bit and that the OS saves the YMM registers (XCR0), as libgcc does.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

Result<const KernelTable*> SelectKernels(std::string_view request, bool cpu_has_avx2) {
  const KernelTable* avx2 = cpu_has_avx2 ? Avx2Kernels() : nullptr;
  if (request.empty() || request == "auto") return avx2 != nullptr ? avx2 : &kBaseline;
  if (request == "baseline") return &kBaseline;
  if (request == "avx2") {
    if (avx2 != nullptr) return avx2;
    return FailedPrecondition(std::string(kIsaEnvVar) +
                              "=avx2 but this CPU (or build) has no AVX2; use baseline or auto");
  }
  return InvalidArgument(std::string(kIsaEnvVar) + "='" + std::string(request) +
                         "' is not one of auto, baseline, avx2");
}

Result<const KernelTable*> KernelsFromEnvironment() {
  const char* env = std::getenv(kIsaEnvVar);
  return SelectKernels(env != nullptr ? env : "", CpuHasAvx2());
}

}  // namespace dualpath::model::internal
