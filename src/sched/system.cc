#include "dualpath/sched/system.h"

#include <algorithm>
#include <string>

namespace dualpath::sched {
namespace {

// "a, b or c" (with "or all" appended when `all`).
std::string Expected(std::span<const SystemKind> accepted, bool all) {
  std::vector<std::string_view> names;
  for (SystemKind k : accepted) names.push_back(SystemName(k));
  if (all) names.push_back("all");
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

Result<SystemKind> Find(std::string_view name, std::span<const SystemKind> accepted, bool all) {
  for (SystemKind k : accepted) {
    if (name == SystemName(k)) return k;
  }
  return InvalidArgument("unknown system '" + std::string(name) + "' (expected " +
                         Expected(accepted, all) + ")");
}

}  // namespace

std::string_view SystemName(SystemKind kind) {
  switch (kind) {
    case SystemKind::kBasic:
      return "basic";
    case SystemKind::kLayerwise:
      return "layerwise";
    case SystemKind::kDualPathRr:
      return "dualpath-rr";
    case SystemKind::kDualPath:
      return "dualpath";
    case SystemKind::kOracle:
      return "oracle";
    case SystemKind::kDualPathSplit:
      return "dualpath-split";
  }
  return "unknown";
}

Result<SystemKind> ParseSystem(std::string_view name, std::span<const SystemKind> accepted) {
  return Find(name, accepted, false);
}

Result<std::vector<SystemKind>> ParseSystemList(std::string_view spec,
                                                std::span<const SystemKind> accepted) {
  std::vector<SystemKind> out;
  auto add = [&out](SystemKind k) {
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  };
  // Items as std::getline splits them: "a,b," is a and b; ",a" and "a,,b" have an empty item.
  size_t pos = 0;
  while (pos < spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string_view item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    if (item == "all") {
      for (SystemKind k : kComparedSystems) add(k);
      continue;
    }
    ASSIGN_OR_RETURN(SystemKind k, Find(item, accepted, true));
    add(k);
  }
  if (out.empty()) {
    return InvalidArgument("no system given (expected " + Expected(accepted, true) + ")");
  }
  return out;
}

SchedConfig PresetFor(SystemKind kind) {
  SchedConfig c;
  switch (kind) {
    case SystemKind::kBasic:
      c = SchedConfig::Basic();
      break;
    case SystemKind::kLayerwise:
      c = SchedConfig::Basic();
      c.layerwise_prefill = true;
      break;
    case SystemKind::kDualPathRr:
      c = SchedConfig::DualPathRoundRobinSide();
      break;
    case SystemKind::kDualPath:
    case SystemKind::kOracle:
      c = SchedConfig::DualPath();
      break;
    case SystemKind::kDualPathSplit:
      c = SchedConfig::DualPath();
      c.split_reads = true;
      break;
  }
  return c;
}

int64_t SchedHitTokens(SystemKind kind, int64_t hit_tokens) {
  return kind == SystemKind::kOracle ? 0 : hit_tokens;
}

bool MovesKv(SystemKind kind) { return kind != SystemKind::kOracle; }

}  // namespace dualpath::sched
