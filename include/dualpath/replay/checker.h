// The correctness checker (issue 8, acceptance 1): recompute every request of a workload with the
// reference model, teacher-forced as the engines decode, and compare each engine result's
// generated tokens and first-token logits digest with it.
//
// References are computed once per workload and shared by every system of a run (the workload,
// and so the right answer, is the same for Basic and DualPath). Per agent the computation is
// incremental (model::ReferenceSession: the KV of the longest token prefix already computed is
// kept and only new positions run, exact because RefModel::ForwardLayer is chunking-invariant).
// Agents are independent, so they are spread over threads.
//
// Thread safety: functions; ComputeReferences starts and joins its own threads and only reads the
// model (RefModel's const methods are thread-safe).
#pragma once

#include <cstdint>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/replay/replayer.h"
#include "dualpath/replay/workload.h"

namespace dualpath::replay {

// refs[a][t]: the reference Generation of workload.agents[a].turns[t].
using References = std::vector<std::vector<model::Generation>>;

// threads = 0: one per online CPU. Errors: kInvalidArgument for a token id >= the model's vocab
// or a turn with fewer teacher tokens than gen_tokens - 1.
Result<References> ComputeReferences(const ReplayWorkload& workload, const model::RefModel& model,
                                     unsigned threads = 0);

struct CheckResult {
  uint64_t checked = 0;     // ok results compared
  uint64_t mismatches = 0;  // generated tokens or first logits digest differ
  uint64_t unknown = 0;     // results naming an agent/turn the workload does not have
  std::vector<uint64_t> mismatched_ids;
};

// Compares every ok record with its reference (failed records are counted by the replayer, not
// here; an unknown agent or turn counts as a mismatch too).
CheckResult CheckRecords(const ReplayWorkload& workload, const References& refs,
                         const std::vector<RequestRecord>& records);

}  // namespace dualpath::replay
