#include "dualpath/sched/routing.h"

#include <fmt/format.h>

namespace dualpath::sched {

std::string_view RoutingName(Routing routing) {
  switch (routing) {
    case Routing::kDualPath:
      return "dualpath";
    case Routing::kRoundRobin:
      return "round-robin";
    case Routing::kSticky:
      return "sticky";
  }
  return "unknown";
}

Result<Routing> ParseRouting(std::string_view name) {
  for (Routing r : {Routing::kDualPath, Routing::kRoundRobin, Routing::kSticky}) {
    if (name == RoutingName(r)) return r;
  }
  return InvalidArgument(fmt::format(
      "--routing: unknown routing '{}' (expected dualpath, round-robin or sticky)", name));
}

std::optional<uint32_t> RoutedPrefillIndex(Routing routing, uint64_t agent, uint64_t turn,
                                           uint32_t prefill_engines) {
  if (prefill_engines == 0) return std::nullopt;
  const uint64_t p = prefill_engines;
  switch (routing) {
    case Routing::kDualPath:
      return std::nullopt;
    case Routing::kRoundRobin:
      // Each term reduced first: agent + turn cannot overflow.
      return static_cast<uint32_t>((agent % p + turn % p) % p);
    case Routing::kSticky:
      return static_cast<uint32_t>(agent % p);
  }
  return std::nullopt;
}

}  // namespace dualpath::sched
