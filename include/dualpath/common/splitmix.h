// splitmix64 (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number generators"): the one
// definition of the 64-bit generator and mixer that seeded streams across dualpath use (model
// weights, synthetic token ids, benchmark and test block names, test payloads).
//
// The generator adds the golden-ratio increment to its state and returns the state passed through
// the finalizer; the finalizer alone (Mix) is a bijection of 64-bit values, so distinct inputs
// never collide. Output is pinned: tests/kv/gen_vectors.py and src/model/ref_model_test.cc
// transcribe the same arithmetic, and seeded outputs (weights, token streams) must not change.
//
// Thread safety: a SplitMix64 is a plain value (one thread at a time); Mix is a pure function.
#pragma once

#include <cstdint>

namespace dualpath {

class SplitMix64 {
 public:
  // The state increment (2^64 / golden ratio, odd).
  static constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

  // The finalizer: a bijective 64-bit mixer.
  static constexpr uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  constexpr explicit SplitMix64(uint64_t seed) : state_(seed) {}

  // The next value of the stream: state += kGamma, then Mix(state).
  constexpr uint64_t Next() {
    state_ += kGamma;
    return Mix(state_);
  }

 private:
  uint64_t state_;
};

}  // namespace dualpath
