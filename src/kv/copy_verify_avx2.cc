// The AVX2 paths of CopyAndChecksum (copy_verify.h) and of BlockChecksum (block_file.h) for
// payloads. This file alone is built with -mavx2 and is
// entered only after a run-time check (copy_verify.cc). It carries its own inlined XXH3 so that the
// hash runs with AVX2 too (Debian's libxxhash is built for SSE2); XXH3's output does not depend on
// the vector width, so the value equals kv::BlockChecksum.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <immintrin.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "dualpath/common/check.h"

namespace dualpath::kv::internal {
namespace {

// Slices stay in L1/L2 between the hash and the copy.
constexpr uint64_t kSlice = 16 << 10;

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

// Streams [src, src + n) to dst, which must be 32-byte aligned; n a multiple of 128.
void StreamCopy(const std::byte* src, std::byte* dst, uint64_t n) {
  for (uint64_t i = 0; i < n; i += 128) {
    const auto* s = reinterpret_cast<const __m256i*>(src + i);
    auto* d = reinterpret_cast<__m256i*>(dst + i);
    const __m256i a = _mm256_loadu_si256(s);
    const __m256i b = _mm256_loadu_si256(s + 1);
    const __m256i c = _mm256_loadu_si256(s + 2);
    const __m256i e = _mm256_loadu_si256(s + 3);
    _mm256_stream_si256(d, a);
    _mm256_stream_si256(d + 1, b);
    _mm256_stream_si256(d + 2, c);
    _mm256_stream_si256(d + 3, e);
  }
}

}  // namespace

uint64_t CopyAndChecksumAvx2(const std::byte* src, std::byte* dst, uint64_t n, uint64_t seed) {
  thread_local std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  DUALPATH_CHECK(state != nullptr, "XXH3_createState failed");
  XXH3_state_t* st = state.get();
  XXH3_64bits_reset_withSeed(st, seed);
  // Head: bring dst to a 32-byte boundary with an ordinary copy.
  uint64_t off = std::min<uint64_t>(n, (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31);
  XXH3_64bits_update(st, src, off);
  std::memcpy(dst, src, off);
  while (off < n) {
    const uint64_t take = std::min(kSlice, n - off);
    XXH3_64bits_update(st, src + off, take);  // pulls the slice into cache
    const uint64_t streamed = take & ~uint64_t{127};
    StreamCopy(src + off, dst + off, streamed);
    std::memcpy(dst + off + streamed, src + off + streamed, take - streamed);
    off += take;
  }
  _mm_sfence();  // order the streaming stores before the caller is told the copy is done
  return XXH3_64bits_digest(st);
}

uint64_t ChecksumAvx2(const std::byte* p, uint64_t n, uint64_t seed) {
  return XXH3_64bits_withSeed(p, n, seed);  // inlined here, with XXH_VECTOR = AVX2
}

}  // namespace dualpath::kv::internal
