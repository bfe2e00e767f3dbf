// Small deterministic random helpers for the synthetic generator.
//
// std::mt19937_64 is specified bit-exactly by the standard; the distributions below are our own so
// that a seed gives the same workload with any standard library (libstdc++'s
// std::normal_distribution is not portable across implementations).
//
// Thread safety: an Rng is a value; use one per thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace dualpath::trace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }

  // Standard normal by Box-Muller (the second value is discarded: simpler, and the generator is
  // nowhere near a bottleneck).
  double Normal() {
    double u1 = Uniform();
    while (u1 <= 0.0) {
      u1 = Uniform();
    }
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  // Lognormal with the given median and log-space sigma.
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }

  uint64_t Next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace dualpath::trace
