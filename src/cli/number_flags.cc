#include "cli/number_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

namespace dualpath::cli {
namespace {

enum class NumberKind { kUnsigned, kSigned, kFloat, kOther };

NumberKind KindOf(const CLI::Option& option) {
  // Flags take no value (their "value" is a count or true/false), nothing to guard.
  if (option.get_type_size() == 0) return NumberKind::kOther;
  // get_type_name() is CLI11's type name, followed by ":<validator>" for each check added.
  const std::string type = option.get_type_name();
  auto is = [&](const char* name) {
    const size_t n = std::char_traits<char>::length(name);
    return type.compare(0, n, name) == 0 && (type.size() == n || type[n] == ':');
  };
  if (is("UINT")) return NumberKind::kUnsigned;
  if (is("INT")) return NumberKind::kSigned;
  if (is("FLOAT")) return NumberKind::kFloat;
  return NumberKind::kOther;
}

// "" when `text` is acceptable for its kind, else why not. A text that is no number at all is
// left to CLI11's own conversion, which refuses it naming the flag.
std::string Refusal(NumberKind kind, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\n\v\f\r");
  if (first == std::string::npos) return "";
  char* end = nullptr;
  errno = 0;
  switch (kind) {
    case NumberKind::kUnsigned:
      // strtoull would negate "-1" into 2^64-1.
      if (text[first] == '-') {
        return text + " is negative: this flag takes a whole number >= 0";
      }
      (void)std::strtoull(text.c_str(), &end, 0);
      if (errno == ERANGE) return text + " is beyond 2^64-1";
      return "";
    case NumberKind::kSigned:
      (void)std::strtoll(text.c_str(), &end, 0);
      if (errno == ERANGE) return text + " is beyond the 64-bit range [-2^63, 2^63-1]";
      return "";
    case NumberKind::kFloat: {
      const long double v = std::strtold(text.c_str(), &end);
      if (end == text.c_str()) return "";
      // nan, inf and values a double cannot hold (1e999) would reach the command as nan or inf.
      if (!std::isfinite(static_cast<double>(v))) return text + " is not a finite number";
      return "";
    }
    case NumberKind::kOther:
      return "";
  }
  return "";
}

void Guard(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const NumberKind kind = KindOf(*option);
    if (kind == NumberKind::kOther) continue;
    // Description "": the help's type column stays as it was ("UINT", not "UINT:...").
    option->check(
        CLI::Validator([kind](std::string& text) { return Refusal(kind, text); }, "", "number"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) Guard(*sub);
}

}  // namespace

void GuardNumberOptions(CLI::App& app) { Guard(app); }

Result<uint64_t> ParseSize(const std::string& what, const std::string& s) {
  if (s.empty()) return InvalidArgument(what + ": empty size");
  // stoull would accept "-1" (as 2^64-1) and leading blanks: a size starts with a digit.
  if (s[0] < '0' || s[0] > '9') {
    return InvalidArgument(what + ": '" + s + "' is not a size (e.g. 4096, 64K, 4M, 8G)");
  }
  size_t pos = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(s, &pos);
  } catch (const std::exception&) {
    return InvalidArgument(what + ": '" + s + "' is not a size (e.g. 4096, 64K, 4M, 8G)");
  }
  const std::string unit = s.substr(pos);
  uint64_t mult = 1;
  if (unit == "K" || unit == "k" || unit == "KiB") {
    mult = 1ull << 10;
  } else if (unit == "M" || unit == "m" || unit == "MiB") {
    mult = 1ull << 20;
  } else if (unit == "G" || unit == "g" || unit == "GiB") {
    mult = 1ull << 30;
  } else if (!unit.empty()) {
    return InvalidArgument(what + ": '" + s + "' has an unknown unit (use K, M or G)");
  }
  // A file size is an off_t: at most 2^63-1 bytes (and v * mult must not wrap).
  constexpr uint64_t kMaxSize = uint64_t{INT64_MAX};
  if (v > kMaxSize / mult) {
    return InvalidArgument(what + ": '" + s + "' is more than 2^63-1 bytes");
  }
  return v * mult;
}

}  // namespace dualpath::cli
