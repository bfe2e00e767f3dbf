// Request routing: which prefill engine (PE) takes an agent's turn, beyond the paper's §6.1
// choice. Seed 003's scaling test (vLLM x Mooncake) spread each agent's turns over instances with
// round-robin routing, so that a turn often lands on another instance than the one that computed
// its prefix: what a cluster-wide KV pool must serve as cross-instance hits (issue 16).
//
//   dualpath     the system's own PE choice (§6.1 categories and load; the default, unchanged)
//   round-robin  turn k of agent a goes to PE (a + k) mod P: consecutive turns change engines
//   sticky       every turn of agent a goes to PE a mod P: the prefix stays on one engine
//
// P counts every prefill engine of the deployment in a fixed order (the service: its expected
// engines; the simulator: its PEs), live or not, so that a death does not reshuffle the other
// agents. A fixed engine is a preference a driver may drop: a driver whose fixed engine is dead,
// or cannot hold the request, or that retries a failed attempt, submits the request without one
// (the normal choice), so routing never makes a request wait for or fail on an engine that cannot
// serve it. The decode engine is chosen as before. The scheduler itself takes a fixed engine as
// SchedRequest::prefill_engine (types.h).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath::sched {

enum class Routing : uint8_t {
  kDualPath,    // the system's own choice (no fixed engine)
  kRoundRobin,  // (agent + turn) mod P
  kSticky,      // agent mod P
};

// "dualpath", "round-robin", "sticky".
std::string_view RoutingName(Routing routing);

// One of the names above; kInvalidArgument otherwise:
//   --routing: unknown routing 'rr' (expected dualpath, round-robin or sticky)
Result<Routing> ParseRouting(std::string_view name);

// The index in [0, prefill_engines) of the prefill engine that turn `turn` (0-based) of agent
// `agent` goes to, or nullopt for kDualPath or when there is no prefill engine.
std::optional<uint32_t> RoutedPrefillIndex(Routing routing, uint64_t agent, uint64_t turn,
                                           uint32_t prefill_engines);

}  // namespace dualpath::sched
