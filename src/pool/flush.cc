#include "pool/flush.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace dualpath::pool::internal {
namespace {

constexpr uintptr_t kLine = 64;

bool DetectClflushopt() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) {
    return false;
  }
  return (ebx & (1u << 23)) != 0;  // CPUID.(EAX=7,ECX=0):EBX.CLFLUSHOPT[bit 23]
}

__attribute__((target("clflushopt"))) void ClflushoptRange(uintptr_t begin, uintptr_t end) {
  for (uintptr_t a = begin; a < end; a += kLine) {
    _mm_clflushopt(reinterpret_cast<void*>(a));
  }
}

}  // namespace

bool HaveClflushopt() {
  static const bool have = DetectClflushopt();
  return have;
}

void FlushLines(const void* p, size_t n) {
  if (n == 0) return;
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  // The fence before orders earlier stores to these lines ahead of the flush; clflush itself is
  // ordered with respect to stores to the same line and completes write-back before retiring.
  _mm_mfence();
  for (; a < end; a += kLine) {
    _mm_clflush(reinterpret_cast<const void*>(a));
  }
  _mm_mfence();
}

void InvalidateRange(const void* p, size_t n) {
  if (n == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  if (HaveClflushopt()) {
    ClflushoptRange(begin, end);
  } else {
    for (uintptr_t a = begin; a < end; a += kLine) {
      _mm_clflush(reinterpret_cast<const void*>(a));
    }
  }
  _mm_mfence();  // later loads of the payload come after the invalidations
}

void StreamCopy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  // Head up to the first line boundary: ordinary stores, then flushed.
  const size_t head =
      std::min(n, static_cast<size_t>((kLine - reinterpret_cast<uintptr_t>(d) % kLine) % kLine));
  if (head > 0) {
    std::memcpy(d, s, head);
    FlushLines(d, head);
    d += head;
    s += head;
    n -= head;
  }
  const size_t body = n & ~(kLine - 1);
  for (size_t i = 0; i < body; i += kLine) {
    // Unaligned loads from the source (any alignment), streaming aligned stores to the pool.
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  _mm_sfence();  // non-temporal stores are weakly ordered: drain them before publication
  const size_t tail = n - body;
  if (tail > 0) {
    std::memcpy(d + body, s + body, tail);
    FlushLines(d + body, tail);
  }
}

}  // namespace dualpath::pool::internal
