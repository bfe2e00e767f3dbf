#include "dualpath/store/types.h"

#include <array>
#include <cstdio>
#include <cstring>

#include "dualpath/kv/block_file.h"

namespace dualpath::store {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kDram:
      return "dram";
    case Tier::kSsd:
      return "ssd";
  }
  return "unknown-tier";
}

std::string ObjectKey::ShortString() const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016llx/%016llx..",
                static_cast<unsigned long long>(model_fingerprint),
                static_cast<unsigned long long>(__builtin_bswap64(hash.Prefix64())));
  return buf;
}

std::ostream& operator<<(std::ostream& os, const ObjectKey& key) { return os << key.ShortString(); }

uint64_t ObjectKeySeed(const ObjectKey& key) {
  // Little-endian hosts only (block_file.cc asserts it): the fingerprint's bytes as stored.
  std::array<std::byte, 8 + 32> text;
  std::memcpy(text.data(), &key.model_fingerprint, 8);
  std::memcpy(text.data() + 8, key.hash.bytes.data(), 32);
  return kv::BlockChecksum(text);
}

uint64_t ObjectChecksum(const ObjectKey& key, std::span<const std::byte> bytes) {
  return kv::BlockChecksum(bytes, ObjectKeySeed(key));
}

std::ostream& operator<<(std::ostream& os, const Replica& r) {
  return os << "node " << r.node << " " << TierName(r.tier) << " @" << r.offset << " +" << r.size;
}

}  // namespace dualpath::store
