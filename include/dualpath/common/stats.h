// Summary statistics shared by every component that reports latencies: the one definition of a
// percentile, so that p50/p99 mean the same in `dualpath sim`, `cluster run` and the benchmarks.
//
// Percentile is the nearest-rank percentile: the smallest value with at least a fraction q of the
// values at or below it, i.e. the value of 1-based rank ceil(q * n) in sorted order (rank 1 for
// q = 0, rank n for q >= 1). p50 of {1, 2, 3, 4} is 2 and p99 of 1..100 is 99. It always returns
// one of the values (no interpolation), so a percentile of integer nanoseconds is itself a
// measured latency. The simulator, the cluster run and the transfer benchmark all report p50/p99
// this way (docs/sim.md, docs/replay.md, docs/transfer.md).
//
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <vector>

namespace dualpath {

// 0-based index, in sorted order, of the nearest-rank q-percentile of n > 0 values (q in [0, 1];
// values outside are clamped to the minimum or the maximum).
inline size_t NearestRankIndex(size_t n, double q) {
  const double rank = std::ceil(q * static_cast<double>(n));
  if (!(rank >= 1)) return 0;  // q <= 0 (and NaN): the minimum
  return std::min(static_cast<size_t>(rank) - 1, n - 1);
}

// Nearest-rank q-percentile of `values` (see above); T{} (0) for an empty list. Takes the values
// by value and partially reorders its copy (nth_element: O(n), no full sort).
template <typename T>
T Percentile(std::vector<T> values, double q) {
  if (values.empty()) return T{};
  const size_t k = NearestRankIndex(values.size(), q);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

}  // namespace dualpath
