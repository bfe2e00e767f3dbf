// The model-dependent steps of `cluster run`: resolving the model spec every process is started
// with, and the correctness check of every non-Oracle run against the reference model.
//
// Thread safety: free functions (CheckRuns uses threads of its own through ComputeReferences).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/replay/results.h"
#include "dualpath/replay/workload.h"

namespace dualpath::replay {

// The full spec (RefModelConfig::ToString) for `spec` ("" = defaults); kInvalidArgument if bad.
Result<std::string> ResolveModelSpec(const std::string& spec);
// The vocabulary size of a resolved spec.
Result<uint32_t> ModelVocab(const std::string& spec);

// Recomputes the workload once with the model and sets mismatches / mismatched_ids of every run
// except Oracle's (left unchecked: its hit KV is zeros by design).
Status CheckRuns(const std::string& spec, const ReplayWorkload& workload, unsigned threads,
                 std::vector<SystemRun>& runs, std::ostream& progress);

}  // namespace dualpath::replay
