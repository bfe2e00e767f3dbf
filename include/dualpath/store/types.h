// The value types of the distributed KV store (issue 16): what an object is called (ObjectKey),
// where a copy of it lives (Replica), and the ids the store master hands out (PutId, PinId).
//
// An object is one KV-cache block of one model: its key is the model fingerprint (the
// kv::ModelSpec fingerprint every block file carries) and the block's 32-byte chained hash
// (dualpath/kv/block_hash.h), so two models never share an object and equal keys mean equal bytes.
// Store nodes are named by dualpath::NodeId (dualpath/common/ids.h), the one node id of the
// project: a store node runs on a testbed node and has that node's id.
//
// Ownership: values; nothing here points anywhere.
// Thread safety: values; const access from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/ids.h"
#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"

namespace dualpath::store {

// At most this many copies of one object, each on a different node (issue 16: 1 to 3).
inline constexpr int kMaxReplicas = 3;

// Message limits (docs/store.md "Message limits"): every request has a bound, worked out from
// these batch limits, that its server enforces (common/grpc_server.h: larger is refused with
// RESOURCE_EXHAUSTED before it is parsed).
//
// Keys (or items, put ids) per master call: StoreClient splits a larger batch into calls of at
// most this many, so no caller meets the limit.
inline constexpr size_t kMaxBatchKeys = 16384;
// Replicas per JoinNode message: a node holding more reports them in parts (JoinNodeRequest.part).
inline constexpr size_t kMaxJoinReplicas = 16384;
// Encoded sizes at their largest: an ObjectKey field is 45 bytes (fixed64 9 + 32-byte hash 34 +
// field header 2), a ReportedReplica 80 (key 45, tier 2, offset and size varints 11 each, checksum
// 9, header 2), a PutStart item 58 (key 45, size 11, header 2).
inline constexpr int64_t kMaxObjectKeyBytes = 45;
inline constexpr int64_t kMaxReportedReplicaBytes = 80;
inline constexpr int64_t kMaxPutItemBytes = 58;
// Room for a message's other fields: an endpoint's host, addresses and shm path (a path of at most
// PATH_MAX), a leader id.
inline constexpr int64_t kMaxHeaderBytes = 64 << 10;
// StoreMaster's largest request: a JoinNode part (kMaxJoinReplicas x 80 B = 1.25 MiB), above a
// PutStart (kMaxBatchKeys x 58 B = 0.91 MiB), a Get or Remove (x 45 B), an Exists (x 32 B) and a
// PutCommit (x 22 B), with the header room: rounded up to 2 MiB.
inline constexpr int64_t kMaxMasterRequestBytes = int64_t{2} << 20;
// StoreNode's largest request: the master's Record of one PutCommit batch's replicas on the node
// (at most kMaxBatchKeys x 80 B) or Forget of one Remove batch (x 45 B): 2 MiB.
inline constexpr int64_t kMaxNodeRequestBytes = int64_t{2} << 20;
static_assert(static_cast<int64_t>(kMaxJoinReplicas) * kMaxReportedReplicaBytes + kMaxHeaderBytes <=
              kMaxMasterRequestBytes);
static_assert(static_cast<int64_t>(kMaxBatchKeys) * kMaxPutItemBytes + kMaxHeaderBytes <=
              kMaxMasterRequestBytes);
static_assert(static_cast<int64_t>(kMaxBatchKeys) * kMaxReportedReplicaBytes + kMaxHeaderBytes <=
              kMaxNodeRequestBytes);

// The storage tier a replica lives in on its node: the node's shared-memory pool (DRAM) or its
// node-local SSD path.
enum class Tier : uint8_t { kDram = 0, kSsd = 1 };
// The longest a store node's or client's transfer thread may keep polling after its last event
// (transfer::EngineConfig::idle_spin, with busy_poll).
inline constexpr Nanos kMaxTransferIdleSpin = 100 * kNanosPerMilli;
// InvalidArgument naming `who` ("store node", "store client") when busy_poll is on and idle_spin
// is outside 0..kMaxTransferIdleSpin.
Status CheckTransferIdleSpin(bool busy_poll, Nanos idle_spin, std::string_view who);

inline constexpr int kNumTiers = 2;

// False for a value outside the enum (a Tier cast from a message or a file).
inline bool IsValidTier(Tier tier) { return static_cast<uint8_t>(tier) < kNumTiers; }
// "dram" / "ssd".
std::string_view TierName(Tier tier);

// One put in progress, from PutStart until PutCommit, PutAbort or its timeout.
using PutId = StrongId<struct PutIdTag, uint64_t>;
// One reader's lease over the objects one Get returned, until Unpin or its expiry.
using PinId = StrongId<struct PinIdTag, uint64_t>;

struct ObjectKey {
  uint64_t model_fingerprint = 0;
  kv::BlockHash hash;

  // "<fingerprint hex>/<first 8 bytes of the hash, hex>..": short, for error messages.
  std::string ShortString() const;

  auto operator<=>(const ObjectKey&) const = default;
  bool operator==(const ObjectKey&) const = default;
};

std::ostream& operator<<(std::ostream& os, const ObjectKey& key);

// The checksum of an object: XXH3-64 of its bytes seeded with ObjectKeySeed(key). The writer
// computes it and commits it; every reader recomputes it under the key it asked for. Bytes that
// belong to another key (a forged or stale record pointing key B at key A's location, with A's
// checksum) fail it, whatever the master, a node's report or a Record claims, so they are a miss,
// never data. One pass over the bytes, as an unseeded checksum (docs/store.md "Consistency
// promises", docs/formats/store_tier_file.md "Objects").
uint64_t ObjectChecksum(const ObjectKey& key, std::span<const std::byte> bytes);
// kv::KeySeed(fingerprint, hash): XXH3-64 of the key's 40 bytes.
uint64_t ObjectKeySeed(const ObjectKey& key);

// One copy of an object: on `node`, in `tier`, at byte `offset` of that node's tier space,
// `size` bytes whose checksum is `checksum` (ObjectChecksum, set by the writer at commit; 0 in a
// PutStart answer, which hands out locations before anything is written).
struct Replica {
  NodeId node;
  Tier tier = Tier::kDram;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;

  bool operator==(const Replica&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Replica& r);

}  // namespace dualpath::store

template <>
struct std::hash<dualpath::store::ObjectKey> {
  // The block hash is already a uniform digest; the fingerprint is mixed in with a multiply so
  // that the same block hash under two models lands in different buckets.
  size_t operator()(const dualpath::store::ObjectKey& k) const noexcept {
    return static_cast<size_t>(k.hash.Prefix64() ^ (k.model_fingerprint * 0x9E3779B97F4A7C15ULL));
  }
};
