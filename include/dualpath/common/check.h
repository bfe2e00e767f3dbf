// Always-on invariant checks.
//
// DUALPATH_CHECK guards invariants whose violation would corrupt state (a refcount underflow, bad
// magic in a shared-memory region): it is never compiled out, prints where and why, and aborts.
// It is not for input validation: bad input gets a Status.
#pragma once

#include <string_view>

namespace dualpath::internal {
[[noreturn]] void CheckFailed(const char* file, int line, std::string_view condition,
                              std::string_view message);
}  // namespace dualpath::internal

// `msg` is anything convertible to std::string_view (evaluated only on failure).
#define DUALPATH_CHECK(cond, msg)                                          \
  do {                                                                     \
    if (!(cond)) [[unlikely]] {                                            \
      ::dualpath::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
    }                                                                      \
  } while (0)

#define DUALPATH_FATAL(msg) ::dualpath::internal::CheckFailed(__FILE__, __LINE__, "", (msg))
