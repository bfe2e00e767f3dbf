// Minimal canonical CBOR (RFC 8949 §4.2.1, as cbor2.dumps(..., canonical=True) writes it) for
// exactly the shapes vLLM's sha256_cbor block hash serializes: unsigned integers, byte strings,
// text strings, arrays and null. Canonical means the shortest head for every length and integer,
// which is also what cbor2 always emits for these types.
//
// Private to src/kv. Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
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
