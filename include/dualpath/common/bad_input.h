// Which error codes mean "the input was wrong" (a bad flag value, file, token or config), as
// opposed to a runtime failure. One definition for the CLI's exit status 2 (src/cli/main.cc) and
// for the gRPC table, which sends these as INVALID_ARGUMENT (kOutOfRange aside: it has gRPC's
// OUT_OF_RANGE of its own).
//
// Thread safety: pure function.
#pragma once

#include "dualpath/common/status.h"

namespace dualpath {

constexpr bool IsBadInputCode(Code code) {
  switch (code) {
    case Code::kInvalidArgument:
    case Code::kParseError:
    case Code::kOutOfRange:
    case Code::kKvUnknownModel:
    case Code::kKvBadToken:
    case Code::kTraceMalformed:
    case Code::kSchedBadConfig:
    case Code::kSimBadConfig:
    case Code::kCliUsage:
      return true;
    default:
      return false;
  }
}

}  // namespace dualpath
