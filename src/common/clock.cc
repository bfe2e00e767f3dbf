#include "dualpath/common/clock.h"

#include <chrono>
#include <string>

#include "dualpath/common/check.h"

namespace dualpath {

Nanos SteadyClock::Now() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SteadyClock& SteadyClock::Default() {
  static SteadyClock clock;
  return clock;
}

void ManualClock::Advance(Nanos delta) {
  DUALPATH_CHECK(delta >= 0, "ManualClock cannot go backwards by " + std::to_string(-delta));
  now_.fetch_add(delta, std::memory_order_acq_rel);
}

void ManualClock::Set(Nanos t) {
  Nanos cur = now_.load(std::memory_order_acquire);
  DUALPATH_CHECK(t >= cur, "ManualClock::Set to the past");
  now_.store(t, std::memory_order_release);
}

}  // namespace dualpath
