#include "dualpath/store/types.h"

#include <fmt/format.h>

#include <cstdio>

#include "dualpath/kv/block_file.h"

namespace dualpath::store {

Status CheckTransferIdleSpin(bool busy_poll, Nanos idle_spin, std::string_view who) {
  if (busy_poll && (idle_spin < 0 || idle_spin > kMaxTransferIdleSpin)) {
    return InvalidArgument(
        fmt::format("{} transfer idle_spin {} ns is outside 0..100 ms", who, idle_spin));
  }
  return Status::Ok();
}

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
  return kv::KeySeed(key.model_fingerprint, key.hash);
}

uint64_t ObjectChecksum(const ObjectKey& key, std::span<const std::byte> bytes) {
  return kv::BlockChecksum(bytes, ObjectKeySeed(key));
}

std::ostream& operator<<(std::ostream& os, const Replica& r) {
  return os << "node " << r.node << " " << TierName(r.tier) << " @" << r.offset << " +" << r.size;
}

}  // namespace dualpath::store
