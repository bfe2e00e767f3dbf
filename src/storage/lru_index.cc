#include "storage/lru_index.h"

namespace dualpath::storage::internal {

void LruIndex::Insert(const kv::BlockHash& hash, uint64_t bytes) {
  auto it = map_.find(hash);
  if (it != map_.end()) {
    total_bytes_ -= it->second.bytes;
    it->second.bytes = bytes;
    total_bytes_ += bytes;
    order_.splice(order_.begin(), order_, it->second.pos);
    return;
  }
  order_.push_front(hash);
  map_.emplace(hash, Entry{bytes, order_.begin()});
  total_bytes_ += bytes;
}

bool LruIndex::Touch(const kv::BlockHash& hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) {
    return false;
  }
  order_.splice(order_.begin(), order_, it->second.pos);
  return true;
}

bool LruIndex::Erase(const kv::BlockHash& hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) {
    return false;
  }
  total_bytes_ -= it->second.bytes;
  order_.erase(it->second.pos);
  map_.erase(it);
  return true;
}

std::vector<kv::BlockHash> LruIndex::Victims(uint64_t capacity, uint64_t incoming,
                                             const kv::BlockHash& protect) const {
  std::vector<kv::BlockHash> victims;
  uint64_t total = total_bytes_;
  for (auto it = order_.rbegin(); it != order_.rend() && total + incoming > capacity; ++it) {
    if (*it == protect) {
      continue;
    }
    victims.push_back(*it);
    total -= map_.at(*it).bytes;
  }
  return victims;
}

}  // namespace dualpath::storage::internal
