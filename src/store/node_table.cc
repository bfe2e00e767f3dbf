#include "store/node_table.h"

#include <fmt/format.h>

namespace dualpath::store {

Status NodeReplicaTable::Check(const NodeRecord& r) const {
  if (!IsValidTier(r.tier)) {
    return InvalidArgument(fmt::format("record of {}: tier {} is not a tier", r.key.ShortString(),
                                       static_cast<int>(r.tier)));
  }
  const uint64_t capacity = capacity_[static_cast<int>(r.tier)];
  if (capacity == 0) {
    return InvalidArgument(fmt::format("record of {}: this node has no {} tier",
                                       r.key.ShortString(), TierName(r.tier)));
  }
  if (r.size == 0) {
    return InvalidArgument(fmt::format("record of {}: size 0", r.key.ShortString()));
  }
  if (r.offset > capacity || r.size > capacity - r.offset) {
    return InvalidArgument(
        fmt::format("record of {}: bytes [{}, +{}) run past the {} tier's {} bytes",
                    r.key.ShortString(), r.offset, r.size, TierName(r.tier), capacity));
  }
  return Status::Ok();
}

void NodeReplicaTable::Erase(const ObjectKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  const int t = static_cast<int>(it->second.tier);
  by_offset_[t].erase(it->second.offset);
  used_[t] -= it->second.size;
  by_key_.erase(it);
}

size_t NodeReplicaTable::Record(const NodeRecord& r) {
  size_t replaced = 0;
  if (by_key_.contains(r.key)) {
    Erase(r.key);
    ++replaced;
  }
  auto& offsets = by_offset_[static_cast<int>(r.tier)];
  const uint64_t end = r.offset + r.size;  // Check() ruled out overflow
  std::vector<ObjectKey> overlapping;
  auto it = offsets.lower_bound(r.offset);
  if (it != offsets.begin()) {
    auto prev = std::prev(it);
    const NodeRecord& p = by_key_.at(prev->second);
    if (p.offset + p.size > r.offset) overlapping.push_back(prev->second);
  }
  for (; it != offsets.end() && it->first < end; ++it) overlapping.push_back(it->second);
  for (const ObjectKey& k : overlapping) Erase(k);
  replaced += overlapping.size();
  by_key_.emplace(r.key, r);
  offsets.emplace(r.offset, r.key);
  used_[static_cast<int>(r.tier)] += r.size;
  return replaced;
}

bool NodeReplicaTable::Forget(const ObjectKey& key) {
  if (!by_key_.contains(key)) return false;
  Erase(key);
  return true;
}

std::vector<NodeRecord> NodeReplicaTable::Records() const {
  std::vector<NodeRecord> out;
  out.reserve(by_key_.size());
  for (const auto& offsets : by_offset_) {
    for (const auto& [offset, key] : offsets) out.push_back(by_key_.at(key));
  }
  return out;
}

}  // namespace dualpath::store
