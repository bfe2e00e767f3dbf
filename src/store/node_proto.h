// Conversions between the store's value types (dualpath/store/types.h) and their store.proto
// messages, shared by the store node, the client library and (the Exists answer's bits) the
// master server. Every conversion of a message field
// checks its range (a hash of exactly 32 bytes, a tier inside the enum).
//
// Thread safety: pure functions.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "dualpath/common/status.h"
#include "dualpath/store/types.h"
#include "dualpath/store/v1/store.pb.h"
#include "store/node_table.h"

namespace dualpath::store {

inline void KeyToProto(const ObjectKey& key, v1::ObjectKey* out) {
  out->set_model_fingerprint(key.model_fingerprint);
  out->set_hash(reinterpret_cast<const char*>(key.hash.bytes.data()), key.hash.bytes.size());
}

inline Result<ObjectKey> KeyFromProto(const v1::ObjectKey& in) {
  ObjectKey key;
  key.model_fingerprint = in.model_fingerprint();
  if (in.hash().size() != key.hash.bytes.size()) {
    return InvalidArgument(fmt::format("object key of model {:016x}: hash of {} bytes, not {}",
                                       in.model_fingerprint(), in.hash().size(),
                                       key.hash.bytes.size()));
  }
  std::memcpy(key.hash.bytes.data(), in.hash().data(), key.hash.bytes.size());
  return key;
}

inline Result<Tier> TierFromProto(int value) {
  if (value < 0 || value >= kNumTiers) {
    return InvalidArgument(fmt::format("tier {} is not a tier (0 dram, 1 ssd)", value));
  }
  return static_cast<Tier>(value);
}

inline v1::Tier TierToProto(Tier tier) { return static_cast<v1::Tier>(static_cast<int>(tier)); }

inline Result<NodeRecord> RecordFromProto(const v1::ReportedReplica& in) {
  NodeRecord r;
  ASSIGN_OR_RETURN(r.key, KeyFromProto(in.key()));
  ASSIGN_OR_RETURN(r.tier, TierFromProto(in.tier()));
  r.offset = in.offset();
  r.size = in.size();
  r.checksum = in.checksum();
  return r;
}

inline void RecordToProto(const NodeRecord& r, v1::ReportedReplica* out) {
  KeyToProto(r.key, out->mutable_key());
  out->set_tier(TierToProto(r.tier));
  out->set_offset(r.offset);
  out->set_size(r.size);
  out->set_checksum(r.checksum);
}

// ExistsResponse.found_bits of per-key flags (store.proto): key i is bit i % 8 of byte i / 8.
// One bit per key instead of a byte (issue 27): 125 bytes for a 1,000-key batch, not 1,000.
inline std::string PackFoundBits(std::span<const uint8_t> found) {
  std::string out((found.size() + 7) / 8, '\0');
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i] != 0) out[i / 8] = static_cast<char>(out[i / 8] | (1u << (i % 8)));
  }
  return out;
}

// Key i's flag in a found_bits answer (the caller checked its size: (n + 7) / 8 bytes).
inline bool FoundBit(const std::string& bits, size_t i) {
  return (static_cast<uint8_t>(bits[i / 8]) >> (i % 8) & 1u) != 0;
}

}  // namespace dualpath::store
