// Mooncake JSONL traces: any bytes as a .jsonl file into ReadMooncakeJsonl, then the session
// inference the replayer runs on it (InferMooncakeSessions) and the statistics (trace_check.h).
#include <cstdint>

#include "dualpath/trace/workload.h"
#include "fuzz_util.h"
#include "trace_check.h"

using namespace dualpath;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchFile file(".jsonl");
  Result<trace::Workload> w = trace::ReadMooncakeJsonl(file.Write(data, size));
  if (!w.ok()) {
    if (w.status().message().empty()) fuzz::Broken("error without a message");
    return 0;
  }
  fuzz::CheckWorkload(*w);
  Result<trace::Workload> sessions = trace::InferMooncakeSessions(*w);
  if (sessions.ok()) fuzz::CheckWorkload(*sessions);
  return 0;
}
