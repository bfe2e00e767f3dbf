// The systems a run compares (DualPath §7.2 Basic, DualPath and Oracle, the ablation steps of §7.5,
// and split reads beyond the paper): their names, how a command line names them, the scheduler
// config each one runs, and the Oracle rule. The one definition every driver uses: the simulator
// (`dualpath sim`), the scheduler service (`dualpath control serve`), the cluster run
// (`dualpath cluster run --system`) and `dualpath bench sched`, so that two drivers cannot run
// different systems under one name.
//
// The Oracle rule. Oracle is a timing bound: DualPath's engine choice for requests that read
// nothing from storage and move no KV between engines (no H2D/D2H, no PE->DE transfer). Every
// driver gives the scheduler hit 0 for an Oracle request (SchedHitTokens), so the scheduler places
// no read and counts none in its read-queue view; the engines (or the simulator's cost model) still
// know the real hit and compute only the new tokens, and the driver skips every KV read and
// transfer (MovesKv false; the service sends read side NONE). With hit 0 the scheduler's view of
// the storage-NIC queues stays what the engines report, which is what an Oracle cluster has.
//
// Thread safety: pure functions and constants.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/sched/config.h"

namespace dualpath::sched {

enum class SystemKind : uint8_t {
  kBasic,          // PE read path only, no layerwise prefill (SchedConfig::Basic)
  kLayerwise,      // Basic + layerwise prefill (ablation step 1)
  kDualPathRr,     // + dual-path loading, read side round-robin (ablation step 2)
  kDualPath,       // + the §6 scheduler: read side = shorter read queue, PE read-queue categories
  kOracle,         // DualPath's engine choice without any storage read or KV transfer (see above)
  kDualPathSplit,  // beyond the paper: DualPath + one request's read split across both sides
};

// Every kind, in the order above.
inline constexpr SystemKind kAllSystemKinds[] = {
    SystemKind::kBasic,    SystemKind::kLayerwise, SystemKind::kDualPathRr,
    SystemKind::kDualPath, SystemKind::kOracle,    SystemKind::kDualPathSplit};
// What "all" means in a system list: the paper's comparison (§7.2).
inline constexpr SystemKind kComparedSystems[] = {SystemKind::kBasic, SystemKind::kDualPath,
                                                  SystemKind::kOracle};
// The ablation of §7.5, step by step (`dualpath sim --ablation`).
inline constexpr SystemKind kAblationSystems[] = {SystemKind::kBasic, SystemKind::kLayerwise,
                                                  SystemKind::kDualPathRr, SystemKind::kDualPath};
// What the scheduler service and its engines run (`control serve`, `cluster run`). Split reads
// there are `control serve --split-reads` on top of dualpath.
inline constexpr SystemKind kServiceSystems[] = {SystemKind::kBasic, SystemKind::kDualPath,
                                                 SystemKind::kOracle};

// "basic", "layerwise", "dualpath-rr", "dualpath", "oracle", "dualpath-split".
std::string_view SystemName(SystemKind kind);

// One name among `accepted`; kInvalidArgument otherwise:
//   unknown system 'fast' (expected basic, dualpath or oracle)
Result<SystemKind> ParseSystem(std::string_view name,
                               std::span<const SystemKind> accepted = kAllSystemKinds);

// A comma-separated list of names among `accepted`, "all" standing for kComparedSystems; in the
// order given, each kind once (a repeat is dropped). An empty item or an unknown name is
// kInvalidArgument as in ParseSystem (the accepted names then "or all"); so is an empty list.
Result<std::vector<SystemKind>> ParseSystemList(
    std::string_view spec, std::span<const SystemKind> accepted = kAllSystemKinds);

// The scheduler preset of a kind (§7 baselines and ablation steps, default thresholds):
//   basic          SchedConfig::Basic()                  (layerwise_prefill off)
//   layerwise      SchedConfig::Basic() + layerwise_prefill
//   dualpath-rr    SchedConfig::DualPathRoundRobinSide()
//   dualpath       SchedConfig::DualPath()
//   oracle         SchedConfig::DualPath()               (with the Oracle rule on its inputs)
//   dualpath-split SchedConfig::DualPath() + split_reads
// Drivers set the thresholds, compute quota and block size of their deployment on top.
SchedConfig PresetFor(SystemKind kind);

// The Oracle rule, on the scheduler's input: the hit tokens a driver submits for a request with
// `hit_tokens` cached prompt tokens (0 for Oracle, else hit_tokens).
int64_t SchedHitTokens(SystemKind kind, int64_t hit_tokens);

// The Oracle rule, on the driver's side: whether the system reads hit KV from storage and moves KV
// between engines (false only for Oracle).
bool MovesKv(SystemKind kind);

}  // namespace dualpath::sched
