#include "dualpath/common/check.h"

#include <cstdio>
#include <cstdlib>

namespace dualpath::internal {

void CheckFailed(const char* file, int line, std::string_view condition, std::string_view message) {
  // stderr directly, not the logger: the logger may be the thing that is broken.
  if (condition.empty()) {
    std::fprintf(stderr, "FATAL %s:%d: %.*s\n", file, line, static_cast<int>(message.size()),
                 message.data());
  } else {
    std::fprintf(stderr, "FATAL %s:%d: check failed: %.*s: %.*s\n", file, line,
                 static_cast<int>(condition.size()), condition.data(),
                 static_cast<int>(message.size()), message.data());
  }
  std::fflush(stderr);
  std::abort();
}

}  // namespace dualpath::internal
