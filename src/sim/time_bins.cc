#include "sim/time_bins.h"

#include <algorithm>
#include <cmath>

#include "dualpath/common/check.h"

namespace dualpath::sim {

TimeBins::TimeBins(double width_s) : width_(width_s) {
  DUALPATH_CHECK(width_s > 0 && std::isfinite(width_s), "TimeBins: width must be positive");
}

void TimeBins::MergePairs() {
  const size_t n = (values_.size() + 1) / 2;
  for (size_t i = 0; i < n; ++i) {
    const double hi = 2 * i + 1 < values_.size() ? values_[2 * i + 1] : 0.0;
    values_[i] = values_[2 * i] + hi;
  }
  values_.resize(n);
  width_ *= 2;  // exact in binary floating point
}

void TimeBins::CoarsenTo(double width_s, double end_s) {
  // end / width < kMaxWindows is checked before any index is formed from it, so a huge time can
  // never become an out-of-range size_t (or a huge allocation).
  while (width_ < width_s || end_s / width_ >= static_cast<double>(kMaxWindows)) {
    MergePairs();
  }
}

void TimeBins::AddSpread(double start, double end, double rate) {
  DUALPATH_CHECK(std::isfinite(start) && std::isfinite(end) && start >= 0 && start <= end,
                 "TimeBins: bad interval");
  CoarsenTo(width_, end);
  const auto last = static_cast<size_t>(end / width_);
  if (values_.size() <= last) {
    values_.resize(last + 1, 0.0);
  }
  for (auto w = static_cast<size_t>(start / width_); w <= last; ++w) {
    const double lo = std::max(start, static_cast<double>(w) * width_);
    const double hi = std::min(end, static_cast<double>(w + 1) * width_);
    if (hi > lo) {
      values_[w] += (hi - lo) * rate;
    }
  }
}

}  // namespace dualpath::sim
