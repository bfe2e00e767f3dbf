// LruIndex: which blocks this process believes are in the store, their file sizes, and their
// recency, so the store can stay under a capacity by evicting the least recently used blocks.
//
// The index is a cache of the directory, not the truth: another process or node may add or remove
// files at any time. Readers therefore always go to the file system; the index only drives
// eviction, Contains() fast paths and statistics.
//
// Thread safety: none; BlockStore guards it with its mutex.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "dualpath/kv/block_hash.h"

namespace dualpath::storage::internal {

class LruIndex {
 public:
  // Inserts (or refreshes) `hash` as most recently used with `bytes` on disk.
  void Insert(const kv::BlockHash& hash, uint64_t bytes);
  // Marks `hash` most recently used; false if unknown.
  bool Touch(const kv::BlockHash& hash);
  bool Contains(const kv::BlockHash& hash) const { return map_.contains(hash); }
  // Removes `hash` if present; returns whether it was.
  bool Erase(const kv::BlockHash& hash);
  // Least recently used blocks to remove so that total_bytes() + `incoming` <= capacity, oldest
  // first (they stay in the index until Erase). `protect` is never chosen (the block being
  // written).
  std::vector<kv::BlockHash> Victims(uint64_t capacity, uint64_t incoming,
                                     const kv::BlockHash& protect) const;

  uint64_t total_bytes() const { return total_bytes_; }
  size_t size() const { return map_.size(); }

 private:
  struct Entry {
    uint64_t bytes;
    std::list<kv::BlockHash>::iterator pos;
  };
  std::list<kv::BlockHash> order_;  // front = most recently used
  std::unordered_map<kv::BlockHash, Entry> map_;
  uint64_t total_bytes_ = 0;
};

}  // namespace dualpath::storage::internal
