// Bulk canonical CBOR encoding of unsigned 32-bit integers: the hot loop of sha256_cbor block
// hashing (every token id of every block goes through it).
//
// Two implementations with identical output: a portable scalar one (cbor::WriteUint32Branchless
// per value) and an AVX-512 VBMI2 one that encodes 8 values per step and packs them with
// vpcompressb. EncodeUint32s picks the fastest the CPU supports, once, at first use.
//
// Private to src/kv. Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dualpath::kv::cbor {

// Bytes of writable slack the encoders need past the encoded output (vector stores).
inline constexpr size_t kEncodeSlack = 64;

// Writes the canonical CBOR encodings of values[0, n) back to back at `out` and returns the bytes
// written (<= 5 * n). `out` must have 5 * n + kEncodeSlack bytes of room. Sets *or_all to the
// bitwise OR of all values (callers range-check with it without a second pass).
size_t EncodeUint32s(const uint32_t* values, size_t n, uint8_t* out, uint32_t* or_all);
size_t EncodeUint32sScalar(const uint32_t* values, size_t n, uint8_t* out, uint32_t* or_all);
// The AVX-512 path; only call when HaveAvx512Encoder().
size_t EncodeUint32sAvx512(const uint32_t* values, size_t n, uint8_t* out, uint32_t* or_all);
bool HaveAvx512Encoder();

}  // namespace dualpath::kv::cbor
