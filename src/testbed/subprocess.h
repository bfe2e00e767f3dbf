// Running an external program (ip, tc, bash with the embedded testbed script) and collecting its
// output. Private to the testbed component.
//
// Thread safety: RunProcess may be called from any thread; it forks.
#pragma once

#include <string>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath::testbed {

struct ProcessResult {
  int exit_code = 0;   // exit status, or 128 + signal number if the child was killed
  std::string output;  // stdout and stderr, interleaved as written
};

// Runs argv[0] (looked up in PATH) with argv, stdin from /dev/null, and waits for it. An error
// Status only if it could not be started; a non-zero exit is reported in exit_code.
Result<ProcessResult> RunProcess(const std::vector<std::string>& argv);

}  // namespace dualpath::testbed
