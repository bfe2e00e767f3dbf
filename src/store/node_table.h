// NodeReplicaTable: the replicas one store node holds, as the leader master recorded them
// (StoreNode.Record / Forget, store.proto), and what the node reports when it joins a leader.
//
// The rules (docs/store.md "Store node and client"):
//   - a key has at most one record on a node: a record of a key replaces the key's earlier record;
//   - records of one tier never overlap: a record replaces every earlier record of that tier whose
//     bytes overlap its own (the master handed that space to a new object, so the old object's
//     bytes there are gone);
//   - Forget drops keys (absent keys are no error).
// Check() refuses a record that cannot describe this node's space: size 0, a tier the node does
// not have, bytes past the tier's capacity (or an offset + size that overflows).
//
// Ownership: values only. Thread safety: none; StoreNode serialises access with its mutex.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/store/types.h"

namespace dualpath::store {

struct NodeRecord {
  ObjectKey key;
  Tier tier = Tier::kDram;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;

  bool operator==(const NodeRecord&) const = default;
};

class NodeReplicaTable {
 public:
  // Capacities of the node's tiers in bytes (0: the node has no such tier).
  explicit NodeReplicaTable(std::array<uint64_t, kNumTiers> capacity) : capacity_(capacity) {}

  // kInvalidArgument naming the key and what is wrong, or OK.
  Status Check(const NodeRecord& r) const;
  // Precondition: Check(r).ok(). Adds `r`, replacing the key's earlier record and every record of
  // the same tier overlapping r's bytes; returns how many earlier records it replaced.
  size_t Record(const NodeRecord& r);
  // Drops the key's record; false when there was none.
  bool Forget(const ObjectKey& key);

  // Every record, by tier, then offset.
  std::vector<NodeRecord> Records() const;
  size_t size() const { return by_key_.size(); }
  // Sum of the recorded sizes in `tier`.
  uint64_t used(Tier tier) const { return used_[static_cast<int>(tier)]; }

 private:
  void Erase(const ObjectKey& key);

  std::array<uint64_t, kNumTiers> capacity_;
  std::array<uint64_t, kNumTiers> used_{};
  std::unordered_map<ObjectKey, NodeRecord> by_key_;
  // Per tier: offset -> key. Records of a tier never overlap, so only the record starting before
  // an offset can reach into a range that starts there.
  std::array<std::map<uint64_t, ObjectKey>, kNumTiers> by_offset_;
};

}  // namespace dualpath::store
