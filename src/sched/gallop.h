// GallopUpperBound: std::upper_bound over nondecreasing keys, started from a guess.
//
// Phase 2 of DE scheduling (decode_fetch.cc) needs the longest prefix of a decode group's private
// queue whose HBM needs fit the group's free HBM: an upper bound over the queue's running totals.
// The queue is long (thousands of requests at 48P96D) and the answer moves little between two
// fetches of the group, so a binary search over the whole queue (a dozen probes, each a cache
// miss and a deque index computation: ~3 % of a simulator run, issue 27) is replaced by a gallop
// from the last answer: probes at distance 1, 2, 4, ... until the answer is bracketed, then a
// binary search inside the bracket. The answer is std::upper_bound's whatever the guess
// (gallop_test.cc checks it on random inputs); only the number of probes depends on the guess.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dualpath::sched {

// The first i in [0, n) with key(i) > limit, or n if none; key(i) must be nondecreasing in i.
// `hint` is a guess of the answer, any value (clamped to [0, n]).
template <typename KeyAt>
size_t GallopUpperBound(size_t n, size_t hint, int64_t limit, const KeyAt& key) {
  if (hint > n) hint = n;
  // Invariant: key(i) <= limit for i < lo, key(i) > limit for i >= hi.
  size_t lo = 0, hi = n;
  if (hint < n && key(hint) <= limit) {
    lo = hint + 1;
    for (size_t step = 1;; step *= 2) {
      const size_t probe = hint + step;
      if (probe >= n) break;  // hi stays n
      if (key(probe) > limit) {
        hi = probe;
        break;
      }
      lo = probe + 1;
    }
  } else {
    hi = hint;
    for (size_t step = 1; step <= hint; step *= 2) {
      const size_t probe = hint - step;
      if (key(probe) <= limit) {
        lo = probe + 1;
        break;
      }
      hi = probe;
    }
  }
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (key(mid) <= limit) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace dualpath::sched
