// BlockHash: the 32-byte identity of one KV-cache block.
//
// A block hash names a Full Block everywhere in dualpath: the storage key, the pool's prefix
// index, the scheduler's hit computation. It is a chained prefix hash (see hasher.h): equal hashes
// mean equal token prefixes, so a hash alone identifies the KV content of a block for one model.
// In sha256_cbor mode all 32 bytes are the vLLM SHA-256 digest; in xxh3 mode the first 16 bytes
// are the XXH3-128 digest and the rest are zero.
//
// Thread safety: a value type; const access from any thread.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath::kv {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};

  // 64 lowercase hex characters.
  std::string Hex() const;
  // Parses exactly 64 hex characters (either case); anything else is kInvalidArgument.
  static Result<BlockHash> FromHex(std::string_view hex);
  // First 8 bytes as a little-endian integer: a well-mixed key for hash tables and sharding.
  uint64_t Prefix64() const {
    uint64_t v;
    std::memcpy(&v, bytes.data(), sizeof(v));
    return v;
  }
  bool IsZero() const { return *this == BlockHash{}; }

  auto operator<=>(const BlockHash&) const = default;
  bool operator==(const BlockHash&) const = default;
};

std::ostream& operator<<(std::ostream& os, const BlockHash& h);

// The SHA-256 of n bytes as a BlockHash: how keys that are not block hashes (a connector's string
// keys) become store keys. SHA-NI where the CPU has it, no allocation (the store's Python verbs
// hash every str key of a batch with it).
BlockHash Sha256Of(const void* data, size_t n);

}  // namespace dualpath::kv

template <>
struct std::hash<dualpath::kv::BlockHash> {
  // The bytes are already a cryptographic (or XXH3) digest, so any 8 of them are uniform.
  size_t operator()(const dualpath::kv::BlockHash& h) const noexcept {
    return static_cast<size_t>(h.Prefix64());
  }
};
