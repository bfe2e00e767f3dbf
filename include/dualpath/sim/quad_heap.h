// QuadHeap: the simulator's min-heap, 4-ary on one flat vector.
//
// Used by the event queue (event_queue.h) and by each decode group's completion order
// (simulator.cc). Four children per node: the heap is half as deep as a binary one, and a node's
// children sit next to each other (two cache lines for 32-byte events, one for 16-byte entries).
// The earliest of four children is picked without branches: which child wins is data the branch
// predictor cannot learn, and as branches these comparisons mispredicted about once a level
// (issue 27: most of a binary heap's pop time in the simulator).
//
// `Order` gives the order as two static functions over T:
//   static bool Earlier(const T& x, const T& y);       // x pops before y
//   static size_t EarlierBit(const T& x, const T& y);  // the same as 0/1, without branches
// The order must be total over the elements held at once (no two equal keys): then every
// correct heap pops the same sequence, so results never depend on heap internals
// (quad_heap_test.cc checks the pops against std::priority_queue's).
//
// Thread safety: none (owned by one simulation).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dualpath::sim {

// A (non-negative double, tie-breaker) key as one unsigned 128-bit number, for Orders whose
// primary key is a time or step >= +0.0: the bits of non-negative doubles order as the doubles
// do, so `a < b` on these numbers is the lexicographic (value, tie) order, one integer
// compare-and-borrow on the sift-down's critical path instead of two float compares and the tie
// logic (issue 27). Not for -0.0 (its sign bit orders it after everything), NaN or negatives:
// callers store +0.0 for -0.0 (EventQueue) or check the range (the simulator's decode steps).
__extension__ using OrderKey128 = unsigned __int128;
inline OrderKey128 NonNegativeKey(double value, uint64_t tie) {
  return (static_cast<OrderKey128>(std::bit_cast<uint64_t>(value)) << 64) | tie;
}

template <typename T, typename Order>
class QuadHeap {
 public:
  bool empty() const { return v_.empty(); }
  size_t size() const { return v_.size(); }
  // The earliest element. Precondition: !empty().
  const T& top() const { return v_.front(); }
  void clear() { v_.clear(); }

  void push(const T& x) {
    // Sift up: move parents that pop after `x` down until x's place is found (a hole, not swaps).
    size_t i = v_.size();
    v_.emplace_back();
    while (i > 0) {
      const size_t parent = (i - 1) / kArity;
      if (!Order::Earlier(x, v_[parent])) break;
      v_[i] = v_[parent];
      i = parent;
    }
    v_[i] = x;
  }

  // Removes top(). Precondition: !empty().
  void pop() {
    const T last = v_.back();
    v_.pop_back();
    const size_t n = v_.size();
    if (n == 0) return;
    // Bottom-up: the hole at the root moves down along the earliest children to a leaf, with no
    // comparison against `last` on the way (that early-exit branch mispredicted: the last element
    // belongs near the bottom), then `last` sifts up from there (usually 0-1 levels).
    size_t i = 0;
    for (;;) {
      const size_t first = i * kArity + 1;
      size_t best;
      if (first + kArity <= n) {
        // Four children: the earliest by a branch-free tournament. Keys are unique, so any way
        // of finding the earliest child finds the same one.
        const T* c = &v_[first];
        const size_t b01 = Order::EarlierBit(c[1], c[0]);
        const size_t b23 = 2 + Order::EarlierBit(c[3], c[2]);
        const size_t pick = Order::EarlierBit(c[b23], c[b01]);
        best = first + (b01 ^ ((b01 ^ b23) & (0 - pick)));
      } else {
        if (first >= n) break;
        best = first;
        for (size_t k = first + 1; k < n; ++k) {
          if (Order::Earlier(v_[k], v_[best])) best = k;
        }
      }
      v_[i] = v_[best];
      i = best;
    }
    while (i > 0) {
      const size_t parent = (i - 1) / kArity;
      if (!Order::Earlier(last, v_[parent])) break;
      v_[i] = v_[parent];
      i = parent;
    }
    v_[i] = last;
  }

 private:
  static constexpr size_t kArity = 4;
  std::vector<T> v_;
};

}  // namespace dualpath::sim
