// KernelTable: the hot loops of RefModel behind function pointers, one table per instruction set,
// chosen once per RefModel at Create (private to src/model).
//
// Two tables exist: "baseline" (kernels.h, 16-byte SSE vectors, runs on any x86-64) and "avx2"
// (kernels_avx2.h, 32-byte vectors, compiled with `#pragma GCC target("avx2")` in its own
// translation unit, never FMA). Both give BIT-IDENTICAL results for every input (tested with
// memcmp): the AVX2 path is a faster way to perform the same IEEE operations in the same order, so
// which one a process picks can never change a KV byte, a logit or a token. The dispatch is at the
// granularity of whole loops (one call per attention, projection or norm pass of ForwardLayer), so
// the indirect call costs nothing measurable and the kernels inline into their loops.
//
// Selection: the environment variable DUALPATH_MODEL_ISA (read at each RefModel::Create):
//   unset, "" or "auto"  avx2 when the CPU supports it (__builtin_cpu_supports), else baseline;
//   "baseline"           the SSE path (to compare, or to reproduce a pre-AVX2 run's timing);
//   "avx2"               the AVX2 path; an error (kFailedPrecondition) on a CPU without AVX2;
//   anything else        kInvalidArgument naming the variable and the value.
//
// Thread safety: the tables are immutable constants; every function is a pure function on caller
// memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"
#include "model/attention.h"

namespace dualpath::model::internal {

inline constexpr const char kIsaEnvVar[] = "DUALPATH_MODEL_ISA";

struct KernelTable {
  const char* isa;  // "baseline" or "avx2"

  // Whole loops, what RefModel calls. See attention.h and kernels.h for each contract.
  void (*causal_attention)(const AttentionShape& shape, uint64_t start, size_t n, const float* q,
                           size_t q_stride, const std::byte* kv, float* out,
                           std::vector<float>* scratch);
  void (*mat_vec)(const float* w, size_t rows, size_t cols, const float* x, float* y);
  void (*mat_vec_tokens)(const float* w, size_t rows, size_t cols, const float* x, float* y,
                         size_t n);
  // out[t * cols + i] = RmsNorm of row t of x (n rows of `cols`) with `gain`.
  void (*rms_norm_rows)(const float* x, const float* gain, size_t cols, size_t n, float* out);
  // act[t * ffn + f] = SwiGlu(gate_up[t * 2 * ffn + f], gate_up[t * 2 * ffn + ffn + f]).
  void (*swiglu_rows)(const float* gate_up, size_t ffn, size_t n, float* act);

  // Single kernels (kernels.h), exposed so tests can compare the tables kernel by kernel.
  float (*dot)(const float* a, const float* b, size_t n);
  void (*dot4)(const float* a, const float* const b[4], size_t n, float out[4]);
  float (*sum)(const float* x, size_t n);
  float (*max)(const float* x, size_t n);
  void (*exp_shifted)(float* x, size_t n, float shift);
  void (*axpy)(float s, const float* x, float* y, size_t n);
  void (*axpy4)(const float* s, const float* x0, const float* x1, const float* x2, const float* x3,
                float* y, size_t n);
};

const KernelTable& BaselineKernels();
// nullptr when this build has no AVX2 path (not x86-64). Call its functions only if
// CpuHasAvx2().
const KernelTable* Avx2Kernels();
bool CpuHasAvx2();

// The table for a DUALPATH_MODEL_ISA value on a CPU with or without AVX2 (see above).
Result<const KernelTable*> SelectKernels(std::string_view request, bool cpu_has_avx2);
// SelectKernels(getenv(DUALPATH_MODEL_ISA), CpuHasAvx2()).
Result<const KernelTable*> KernelsFromEnvironment();

}  // namespace dualpath::model::internal
