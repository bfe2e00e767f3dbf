// Range-checked numbers from outside (files, flags, messages) and overflow-checked arithmetic.
//
// The rule for inputs from outside: every number read from a file or flag has a stated range,
// checked where it is parsed, and arithmetic on it cannot overflow silently. Parsers call
// CheckRange / CheckCountRange with the field's name, its range and its unit, so every rejection
// reads the same way:
//   hardware.snic_gbps = 1e-09 is outside [1, 10000] Gbit/s
// and combine parsed integers with CheckedMul / CheckedAdd instead of letting them wrap.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath {

// a * b and a + b, or nullopt when the exact result does not fit in 64 bits.
inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return std::nullopt;
  }
  return out;
}
inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    return std::nullopt;
  }
  return out;
}

// OK when lo <= v <= hi (NaN and infinities never are); otherwise Status(code,
// "<name> = <v> is outside [<lo>, <hi>] <unit>"). `unit` may be empty.
Status CheckRange(std::string_view name, double v, double lo, double hi, std::string_view unit,
                  Code code = Code::kInvalidArgument);
// The same for integers (printed exactly).
Status CheckCountRange(std::string_view name, uint64_t v, uint64_t lo, uint64_t hi,
                       std::string_view unit, Code code = Code::kInvalidArgument);

// A number as the range messages print it: integers up to 2^53 in full, others with %g.
std::string FormatNumber(double v);

}  // namespace dualpath
