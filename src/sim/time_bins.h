// TimeBins: a quantity accumulated per time window, in memory bounded by kMaxWindows whatever the
// simulated time.
//
// The simulator bins storage-NIC bytes and decode-batch integrals per window of
// config.snic_window_s for the plots and the balance metrics. A bin per window of simulated time
// made memory grow with time, not with the workload (issue 19: one think time of 1e8 s took 3 GB,
// a storage NIC of 1e-9 Gbit/s 12 GB in 20 s). Instead, when a time past kMaxWindows windows
// arrives, adjacent windows are merged pairwise and the width doubles, as often as needed: a long
// run keeps at most kMaxWindows windows of width snic_window_s x 2^k. Everything binned is an
// integral over time (bytes, request-seconds), so a merged window holds exactly the sum of its
// halves and ratios of such integrals stay exact.
//
// Thread safety: none (owned by one simulation).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace dualpath::sim {

class TimeBins {
 public:
  // At most this many windows (64 Ki windows of doubles: 512 KiB per series).
  static constexpr size_t kMaxWindows = size_t{1} << 16;

  // width_s > 0: the initial window width.
  explicit TimeBins(double width_s);

  // Adds rate x (overlap with [start, end)) to every window [start, end) overlaps. 0 <= start,
  // start <= end, both finite (checked).
  void AddSpread(double start, double end, double rate);
  // AddSpread(start, end, rates[k]) on every series[k], with the window arithmetic (divisions,
  // bounds) done once for all: for series that are always given the same intervals, so that they
  // have the same width and length (checked), e.g. the simulator's three decode series, which got
  // three AddSpread calls per decode event (issue 27). Each value gets the operations AddSpread
  // gives it, so the values are the same.
  static void AddSpreadTogether(std::span<TimeBins* const> series, double start, double end,
                                std::span<const double> rates);

  // Widens the windows (by merging) until width() >= width_s, or until [0, end_s) fits in
  // kMaxWindows windows, whichever needs the wider window. Widths stay initial x 2^k, so series
  // with the same initial width coarsened to the same width line up window for window.
  void CoarsenTo(double width_s, double end_s = 0);

  double width() const { return width_; }
  // One value per window from time 0 (trailing windows never touched may be absent).
  const std::vector<double>& values() const { return values_; }

 private:
  void MergePairs();

  double width_;
  std::vector<double> values_;
};

}  // namespace dualpath::sim
