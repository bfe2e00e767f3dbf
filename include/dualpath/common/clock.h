// Clocks, injectable so that logic under test (and the scheduler in the simulator) never reads
// wall-clock time itself (leveldb Env, Seastar manual_clock).
//
// Time is a count of nanoseconds since an arbitrary epoch, monotonic.
//
// Thread safety: SteadyClock is stateless; ManualClock may be read and advanced from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace dualpath {

using Nanos = int64_t;

inline constexpr Nanos kNanosPerMicro = 1'000;
inline constexpr Nanos kNanosPerMilli = 1'000'000;
inline constexpr Nanos kNanosPerSecond = 1'000'000'000;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos Now() const = 0;
};

// std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  Nanos Now() const override;
  // Process-wide instance.
  static SteadyClock& Default();
};

// A clock that moves only when told to. Tests and the simulator use it.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = 0) : now_(start) {}
  Nanos Now() const override { return now_.load(std::memory_order_acquire); }
  // Precondition: delta >= 0 (time never goes backwards).
  void Advance(Nanos delta);
  // Precondition: t >= Now().
  void Set(Nanos t);

 private:
  std::atomic<Nanos> now_;
};

inline double ToSeconds(Nanos n) { return static_cast<double>(n) / 1e9; }
inline Nanos FromSeconds(double s) { return static_cast<Nanos>(s * 1e9); }

}  // namespace dualpath
