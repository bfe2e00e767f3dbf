#include "python/copy_verify.h"

#include <xxhash.h>

#include <cstring>

namespace dualpath::python {
namespace internal {
#if defined(__x86_64__)
uint64_t CopyAndChecksumAvx2(const std::byte* src, std::byte* dst, uint64_t n, uint64_t seed);
#endif
}  // namespace internal

namespace {
// Below this the destination is likely to be read soon and small copies gain nothing from
// streaming stores: plain memcpy, then hash.
constexpr uint64_t kStreamMin = 64 << 10;
}  // namespace

uint64_t CopyAndChecksum(const std::byte* src, std::byte* dst, uint64_t n, uint64_t seed) {
#if defined(__x86_64__)
  static const bool have_avx2 = __builtin_cpu_supports("avx2");
  if (n >= kStreamMin && have_avx2) {
    return internal::CopyAndChecksumAvx2(src, dst, n, seed);
  }
#endif
  std::memcpy(dst, src, n);
  return XXH3_64bits_withSeed(dst, n, seed);
}

}  // namespace dualpath::python
