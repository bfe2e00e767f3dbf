// WEKA kv-cache-tester Claude Code sessions (trace_NNNN.json). See docs/formats/trace.md.
#include "dualpath/trace/workload.h"

namespace dualpath::trace {

Result<Workload> ReadWekaSession(const std::string& path) {
  return Unimplemented("ReadWekaSession " + path + ": not yet");
}

Result<Workload> ReadWekaDir(const std::string& dir) {
  return Unimplemented("ReadWekaDir " + dir + ": not yet");
}

}  // namespace dualpath::trace
