// WEKA Claude Code session files: any bytes as a .json file into ReadWekaSession (nested
// sub-agents, compactions, hash ids), then the statistics (trace_check.h).
#include <cstdint>

#include "dualpath/trace/workload.h"
#include "fuzz_util.h"
#include "trace_check.h"

using namespace dualpath;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchFile file(".json");
  Result<trace::Workload> w = trace::ReadWekaSession(file.Write(data, size));
  if (!w.ok()) {
    if (w.status().message().empty()) fuzz::Broken("error without a message");
    return 0;
  }
  fuzz::CheckWorkload(*w);
  return 0;
}
