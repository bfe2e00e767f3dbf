// Faults on the testbed (issue 17): what `dualpath cluster run --fault SPEC` injects into each
// system's replay, and what it measured.
//
//   SPEC = KIND[:NODE]@TRIGGER[:SECONDS]
//   KIND      stor-link:NODE  the node's storage link (stor0) down, then up again
//             comp-link:NODE  the node's compute link (comp0) down, then up again
//             brick           the GlusterFS brick process (glusterfsd) killed with SIGKILL, then
//                             started again (`gluster volume start VOL force`)
//             service         the scheduler service (`control serve`) killed with SIGKILL, then
//                             started again on the same socket with the same arguments
//             store-node:NODE that node's `dualpath store node` (--store only) killed with SIGKILL,
//                             then started again with the same arguments (same id; its DRAM tier
//                             file is replaced at start: it comes back empty)
//             store-leader    the store master that leads (--store only) killed with SIGKILL, then
//                             started again with the same arguments (it comes back a standby)
//             rack-manager    the rack pool's lock manager (a `pool serve`) killed with SIGKILL
//                             (not undone: a standby takes the role)
//             engine:NODE     that node's engine killed with SIGKILL (not undone: the service
//                             reschedules its requests; its buffers in the node's pool are swept)
//   TRIGGER   Nreq            once the replayer has received N results (an event: the fault lands
//                             mid-run whatever the machine's speed)
//             Ns              N seconds into the replay (a timed fault)
//   SECONDS   how long the fault lasts before it is undone (default: 5 for links, 0 for brick,
//             service and the store kinds: restarted at once; rack-manager and engine take none)
//
// e.g. `stor-link:p0@4req:5` takes p0's storage link down for 5 s once 4 requests completed.
// The recovery time is measured from the fault's end (link up again, brick or service started
// again) to the next request completed (docs/faults.md).
//
// Thread safety: pure functions and plain structs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/replay/replayer.h"

namespace dualpath::replay {

enum class FaultKind {
  kStorageLink,
  kComputeLink,
  kBrick,
  kService,
  kStoreNode,
  kStoreLeader,
  kRackManager,  // the rack pool's lock manager (a `pool serve`) is SIGKILLed; not undone
  kEngine,       // a node's engine is SIGKILLed; not undone
};

// Ranges of a fault spec (docs/faults.md), checked by ParseFault.
inline constexpr uint64_t kMaxFaultAfterResults = 10'000'000;
inline constexpr double kMaxFaultSeconds = 3600;  // a fault (or its delay) longer than an hour

struct FaultSpec {
  FaultKind kind = FaultKind::kStorageLink;
  std::string node;              // links and store-node only: the node concerned
  uint64_t after_results = 0;    // trigger: this many results received ...
  double after_s = -1;           // ... or, when >= 0, this many seconds into the replay
  double duration_s = 0;         // how long it lasts before it is undone
  std::string ToString() const;  // the canonical spec, e.g. "stor-link:p0@4req:5"
};

// "stor-link", "comp-link", "brick", "service", "store-node", "store-leader", "rack-manager",
// "engine".
std::string_view FaultKindName(FaultKind kind);

// The kinds that act on the distributed KV store of `cluster run --store` (refused without it).
inline bool FaultNeedsStore(FaultKind kind) {
  return kind == FaultKind::kStoreNode || kind == FaultKind::kStoreLeader;
}

// Parses SPEC (above). kInvalidArgument naming --fault and what is wrong.
Result<FaultSpec> ParseFault(std::string_view spec);

// What a fault did in one system's run.
struct FaultOutcome {
  FaultSpec spec;
  bool injected = false;
  Nanos start_ns = 0;  // wall clock when the fault began (link down, process killed)
  Nanos end_ns = 0;    // when it was undone (link up, process started again)
  // Requests completed (the decode engine's done stamp; the replayer's receipt when there is
  // none) before the fault began, and while it lasted.
  uint64_t results_before = 0;
  uint64_t results_during = 0;
  // Seconds from end_ns to the first request completed after it (nullopt: none was).
  std::optional<double> recovery_s;
  // comp-link: when the scheduler service cut the node's engine off (listed it unreachable over
  // the compute network, or dead), and when it listed it alive and reachable again, as the
  // replay's looks at the service saw it (ListEngines at every health check, <= 200 ms apart);
  // 0: never seen (docs/faults.md "Partitions").
  Nanos cut_off_ns = 0;
  Nanos back_ns = 0;
  // Requests completed between the cut-off and the fault's end: work that moved elsewhere.
  uint64_t results_after_cut_off = 0;
  // Re-submissions by the scheduler service (the sum of the records' attempts: each one adds 1 to
  // its request's attempt), and the requests re-submitted at least once.
  uint64_t scheduler_resubmissions = 0;
  uint64_t requests_resubmitted = 0;
  std::string detail;  // what was done, e.g. "brick pid 1234 killed; glusterfsd pid 5678 started"
  // rack-manager: the node whose `pool serve` held the role and was killed; engine: the node
  // whose engine was killed.
  std::string killed_node;
};

// Fills results_before/during and recovery_s from the run's records.
void MeasureRecovery(const ReplayResult& replay, FaultOutcome& outcome);

}  // namespace dualpath::replay
