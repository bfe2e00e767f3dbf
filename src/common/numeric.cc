#include "dualpath/common/numeric.h"

#include <cmath>
#include <cstdio>

namespace dualpath {
namespace {

std::string RangeMessage(std::string_view name, const std::string& v, const std::string& lo,
                         const std::string& hi, std::string_view unit) {
  std::string msg(name);
  msg += " = " + v + " is outside [" + lo + ", " + hi + "]";
  if (!unit.empty()) {
    msg += " ";
    msg += unit;
  }
  return msg;
}

}  // namespace

std::string FormatNumber(double v) {
  char buf[40];
  // Whole numbers that a double holds exactly print in full (65536, not 6.5536e+04).
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 9007199254740992.0) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.6g", v);
  }
  return buf;
}

Status CheckRange(std::string_view name, double v, double lo, double hi, std::string_view unit,
                  Code code) {
  // Written so that NaN fails: every comparison with NaN is false.
  if (v >= lo && v <= hi) {
    return Status::Ok();
  }
  return Status(code,
                RangeMessage(name, FormatNumber(v), FormatNumber(lo), FormatNumber(hi), unit));
}

Status CheckCountRange(std::string_view name, uint64_t v, uint64_t lo, uint64_t hi,
                       std::string_view unit, Code code) {
  if (v >= lo && v <= hi) {
    return Status::Ok();
  }
  return Status(
      code, RangeMessage(name, std::to_string(v), std::to_string(lo), std::to_string(hi), unit));
}

}  // namespace dualpath
