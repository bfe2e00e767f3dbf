// Minimal canonical CBOR (RFC 8949 §4.2.1, as cbor2.dumps(..., canonical=True) writes it) for
// exactly the shapes vLLM's sha256_cbor block hash serializes: unsigned integers, byte strings,
// text strings, arrays and null. Canonical means the shortest head for every length and integer,
// which is also what cbor2 always emits for these types.
//
// Public for the Python binding, which encodes vLLM's tagged extra keys itself
// (src/python/kv_module.cc). Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace dualpath::kv::cbor {

enum class Major : uint8_t {
  kUnsigned = 0,
  kByteString = 2,
  kTextString = 3,
  kArray = 4,
};

inline constexpr uint8_t kNull = 0xF6;
// The longest head: initial byte + 8-byte argument.
inline constexpr size_t kMaxHeadBytes = 9;

// Writes the head for (major, argument) at `out` and returns the bytes written (1, 2, 3, 5 or 9).
// `out` must have kMaxHeadBytes of room.
inline size_t WriteHead(Major major, uint64_t arg, uint8_t* out) {
  const uint8_t mt = static_cast<uint8_t>(static_cast<uint8_t>(major) << 5);
  if (arg < 24) {
    out[0] = static_cast<uint8_t>(mt | arg);
    return 1;
  }
  if (arg <= 0xFF) {
    out[0] = mt | 24;
    out[1] = static_cast<uint8_t>(arg);
    return 2;
  }
  if (arg <= 0xFFFF) {
    out[0] = mt | 25;
    out[1] = static_cast<uint8_t>(arg >> 8);
    out[2] = static_cast<uint8_t>(arg);
    return 3;
  }
  if (arg <= 0xFFFFFFFFULL) {
    out[0] = mt | 26;
    out[1] = static_cast<uint8_t>(arg >> 24);
    out[2] = static_cast<uint8_t>(arg >> 16);
    out[3] = static_cast<uint8_t>(arg >> 8);
    out[4] = static_cast<uint8_t>(arg);
    return 5;
  }
  out[0] = mt | 27;
  for (int i = 0; i < 8; ++i) {
    out[1 + i] = static_cast<uint8_t>(arg >> (56 - 8 * i));
  }
  return 9;
}

// Writes one unsigned integer < 2^32 in canonical form without data-dependent branches (token ids
// from a real vocabulary mix 1-, 3- and 5-byte encodings unpredictably; a branchy encoder
// mispredicts on most tokens and ran at ~40% of SHA-256 speed). Always stores 8 bytes at `out`
// (the caller keeps 8 bytes of slack) and returns the encoded length (1, 2, 3 or 5).
inline size_t WriteUint32Branchless(uint32_t v, uint8_t* out) {
  // Width class: 0 (< 24, value in the initial byte), 1 (1-byte arg), 2 (2-byte), 3 (4-byte).
  const uint32_t cls = static_cast<uint32_t>(v >= 24) + static_cast<uint32_t>(v >= 256) +
                       static_cast<uint32_t>(v >= 65536);
  static constexpr uint8_t kLen[4] = {1, 2, 3, 5};
  static constexpr uint8_t kShift[4] = {32, 24, 16, 0};  // drop the unused high bytes
  const uint64_t initial = cls == 0 ? v : 0x17 + cls;    // 0x18 / 0x19 / 0x1a, or v itself
  const uint64_t payload = static_cast<uint64_t>(__builtin_bswap32(v)) >> kShift[cls];
  const uint64_t word = initial | (payload << 8);  // little-endian store: initial byte first
  std::memcpy(out, &word, sizeof(word));
  return kLen[cls];
}

// Appends helpers for building whole messages in tests and for the (cold) seed hash.
inline void AppendHead(Major major, uint64_t arg, std::string* out) {
  uint8_t buf[kMaxHeadBytes];
  const size_t n = WriteHead(major, arg, buf);
  out->append(reinterpret_cast<const char*>(buf), n);
}
inline void AppendUnsigned(uint64_t v, std::string* out) { AppendHead(Major::kUnsigned, v, out); }
inline void AppendBytes(std::string_view bytes, std::string* out) {
  AppendHead(Major::kByteString, bytes.size(), out);
  out->append(bytes);
}
inline void AppendText(std::string_view text, std::string* out) {
  AppendHead(Major::kTextString, text.size(), out);
  out->append(text);
}
inline void AppendArrayHead(uint64_t n, std::string* out) { AppendHead(Major::kArray, n, out); }
inline void AppendNull(std::string* out) { out->push_back(static_cast<char>(kNull)); }

}  // namespace dualpath::kv::cbor
