// Helpers shared by the store's unit tests.
#pragma once

#include <cstdint>
#include <cstring>

#include "dualpath/store/types.h"

namespace dualpath::store::testing {

// A distinct key per (i, fingerprint); the hash bytes spread i like a digest would not, which
// is fine for a hash map keyed by its first 8 bytes mixed with the fingerprint.
inline ObjectKey MakeKey(uint64_t i, uint64_t fingerprint = 0xF00D) {
  ObjectKey k;
  k.model_fingerprint = fingerprint;
  const uint64_t mixed = (i + 1) * 0x9E3779B97F4A7C15ULL;
  std::memcpy(k.hash.bytes.data(), &mixed, sizeof(mixed));
  std::memcpy(k.hash.bytes.data() + 8, &i, sizeof(i));
  return k;
}

}  // namespace dualpath::store::testing
