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
  TimeBins* self = this;
  AddSpreadTogether(std::span<TimeBins* const>(&self, 1), start, end,
                    std::span<const double>(&rate, 1));
}

void TimeBins::AddSpreadTogether(std::span<TimeBins* const> series, double start, double end,
                                 std::span<const double> rates) {
  DUALPATH_CHECK(!series.empty() && series.size() == rates.size(), "TimeBins: one rate per series");
  DUALPATH_CHECK(std::isfinite(start) && std::isfinite(end) && start >= 0 && start <= end,
                 "TimeBins: bad interval");
  TimeBins& first = *series[0];
  for (TimeBins* b : series) {
    b->CoarsenTo(b->width_, end);
    DUALPATH_CHECK(b->width_ == first.width_ && b->values_.size() == first.values_.size(),
                   "TimeBins: series spread together must have the same windows");
  }
  const double width = first.width_;
  const auto last = static_cast<size_t>(end / width);
  if (first.values_.size() <= last) {
    for (TimeBins* b : series) b->values_.resize(last + 1, 0.0);
  }
  for (auto w = static_cast<size_t>(start / width); w <= last; ++w) {
    const double lo = std::max(start, static_cast<double>(w) * width);
    const double hi = std::min(end, static_cast<double>(w + 1) * width);
    if (hi > lo) {
      for (size_t k = 0; k < series.size(); ++k) series[k]->values_[w] += (hi - lo) * rates[k];
    }
  }
}

}  // namespace dualpath::sim
