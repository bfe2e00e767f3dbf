// MinIndex: which of n int64 keys is smallest, kept current under single-key updates.
//
// Phase 1 of DE scheduling (decode_fetch.cc) sends every request of the global queue to the
// decode group with the fewest total tokens, ties to the lower group. A linear scan over the 96
// decode groups of a 48P96D cluster, once per request, was ~6 % of a simulator run (issue 27);
// the groups' loads change far less often than they are read (one or two groups per fetch). This
// is a tournament tree over the keys: Min() reads the root, Set() replays the matches on one
// leaf-to-root path (log2 n of them). Each match keeps the left (lower-index) entry unless the
// right one is strictly smaller, so the root is the lowest index among the smallest keys: the
// same answer as a scan that keeps the first minimum. min_index_test.cc checks it against that
// scan on random updates.
//
// Thread safety: none (owned by one SchedulerImpl).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dualpath/common/check.h"

namespace dualpath::sched {

class MinIndex {
 public:
  // n entries, every key 0.
  void Reset(size_t n) {
    n_ = n;
    leaves_ = 1;
    while (leaves_ < n) leaves_ *= 2;
    // Padding leaves hold the largest key and the largest indices, so they never win against a
    // real entry (a real key equal to the maximum still wins: it is to the left).
    node_.assign(2 * leaves_, Node{std::numeric_limits<int64_t>::max(), 0});
    for (size_t i = 0; i < leaves_; ++i) {
      node_[leaves_ + i] =
          Node{i < n ? 0 : std::numeric_limits<int64_t>::max(), static_cast<uint32_t>(i)};
    }
    for (size_t v = leaves_ - 1; v >= 1; --v) node_[v] = Winner(node_[2 * v], node_[2 * v + 1]);
  }
  size_t size() const { return n_; }
  int64_t key(size_t i) const { return node_[leaves_ + i].key; }
  // Sets entry i's key. Precondition (checked): i < size().
  void Set(size_t i, int64_t key) {
    DUALPATH_CHECK(i < n_, "MinIndex::Set: index out of range");
    size_t v = leaves_ + i;
    Node cur{key, static_cast<uint32_t>(i)};
    node_[v] = cur;
    // The path's winner stays in registers; each level loads only the sibling (independent loads,
    // no store-to-load chain through the node just written).
    for (; v > 1; v /= 2) {
      const Node& sib = node_[v ^ 1];
      cur = (v & 1) != 0 ? Winner(sib, cur) : Winner(cur, sib);
      node_[v / 2] = cur;
    }
  }
  void Add(size_t i, int64_t delta) { Set(i, key(i) + delta); }
  // The lowest index among the smallest keys. Precondition: size() > 0.
  size_t Min() const { return node_[1].index; }

 private:
  struct Node {
    int64_t key;
    uint32_t index;
  };
  // The right entry wins only when strictly smaller: ties keep the lower index (left subtrees
  // hold lower indices). Branch-free: which side wins is data the predictor cannot learn.
  // (Masks, not ?:, which GCC turned into branches that mispredicted on most levels.)
  static Node Winner(const Node& l, const Node& r) {
    const uint64_t right = 0 - static_cast<uint64_t>(r.key < l.key);  // all ones: r wins
    const auto lk = static_cast<uint64_t>(l.key), rk = static_cast<uint64_t>(r.key);
    return Node{static_cast<int64_t>(lk ^ ((lk ^ rk) & right)),
                l.index ^ ((l.index ^ r.index) & static_cast<uint32_t>(right))};
  }

  size_t n_ = 0;
  size_t leaves_ = 1;
  std::vector<Node> node_;  // node_[1] the root; node_[leaves_ + i] entry i
};

}  // namespace dualpath::sched
