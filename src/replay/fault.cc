#include "dualpath/replay/fault.h"

#include <charconv>
#include <cstdlib>

#include "dualpath/common/numeric.h"

namespace dualpath::replay {
namespace {

constexpr std::string_view kForm =
    "expected KIND[:NODE]@TRIGGER[:SECONDS] with KIND stor-link:NODE, comp-link:NODE, brick, "
    "service, store-node:NODE, store-leader, rack-manager or engine:NODE and TRIGGER Nreq or Ns, "
    "e.g. stor-link:p0@4req:5";

Status Bad(std::string_view spec, std::string_view why) {
  return InvalidArgument("--fault '" + std::string(spec) + "': " + std::string(why) + " (" +
                         std::string(kForm) + ")");
}

// A whole string as a finite double (strtod on a copy: from_chars for doubles is not in every
// standard library we build with).
std::optional<double> ParseSeconds(std::string_view s) {
  if (s.empty()) return std::nullopt;
  const std::string copy(s);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size()) return std::nullopt;
  return v;
}

Status ParseTrigger(std::string_view spec, std::string_view t, FaultSpec& f) {
  if (t.size() > 3 && t.substr(t.size() - 3) == "req") {
    const std::string_view n = t.substr(0, t.size() - 3);
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (ec != std::errc() || p != n.data() + n.size()) return Bad(spec, "bad request count");
    RETURN_IF_ERROR(CheckCountRange("--fault trigger", v, 0, kMaxFaultAfterResults, "requests"));
    f.after_results = v;
    return Status::Ok();
  }
  if (t.size() > 1 && t.back() == 's') {
    std::optional<double> s = ParseSeconds(t.substr(0, t.size() - 1));
    if (!s) return Bad(spec, "bad trigger seconds");
    RETURN_IF_ERROR(CheckRange("--fault trigger", *s, 0, kMaxFaultSeconds, "s"));
    f.after_s = *s;
    return Status::Ok();
  }
  return Bad(spec, "trigger '" + std::string(t) + "' is neither Nreq nor Ns");
}

}  // namespace

std::string_view FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kStorageLink:
      return "stor-link";
    case FaultKind::kComputeLink:
      return "comp-link";
    case FaultKind::kBrick:
      return "brick";
    case FaultKind::kService:
      return "service";
    case FaultKind::kStoreNode:
      return "store-node";
    case FaultKind::kStoreLeader:
      return "store-leader";
    case FaultKind::kRackManager:
      return "rack-manager";
    case FaultKind::kEngine:
      return "engine";
  }
  return "unknown";
}

std::string FaultSpec::ToString() const {
  std::string s(FaultKindName(kind));
  if (!node.empty()) s += ":" + node;
  s += "@" + (after_s >= 0 ? FormatNumber(after_s) + "s" : std::to_string(after_results) + "req");
  return s + ":" + FormatNumber(duration_s);
}

Result<FaultSpec> ParseFault(std::string_view spec) {
  const size_t at = spec.find('@');
  if (at == std::string_view::npos) return Bad(spec, "no '@'");
  std::string_view what = spec.substr(0, at);
  std::string_view when = spec.substr(at + 1);
  FaultSpec f;
  const size_t colon = what.find(':');
  const std::string_view kind = what.substr(0, colon);
  if (colon != std::string_view::npos) f.node = std::string(what.substr(colon + 1));
  if (kind == "stor-link" || kind == "comp-link") {
    f.kind = kind == "stor-link" ? FaultKind::kStorageLink : FaultKind::kComputeLink;
    if (f.node.empty()) return Bad(spec, std::string(kind) + " needs a node");
    f.duration_s = 5;
  } else if (kind == "store-node" || kind == "engine") {
    f.kind = kind == "store-node" ? FaultKind::kStoreNode : FaultKind::kEngine;
    if (f.node.empty()) return Bad(spec, std::string(kind) + " needs a node");
    f.duration_s = 0;
  } else if (kind == "brick" || kind == "service" || kind == "store-leader" ||
             kind == "rack-manager") {
    f.kind = kind == "brick"          ? FaultKind::kBrick
             : kind == "service"      ? FaultKind::kService
             : kind == "store-leader" ? FaultKind::kStoreLeader
                                      : FaultKind::kRackManager;
    if (colon != std::string_view::npos) return Bad(spec, std::string(kind) + " takes no node");
    f.duration_s = 0;
  } else {
    return Bad(spec, "unknown kind '" + std::string(kind) + "'");
  }
  const size_t colon2 = when.find(':');
  RETURN_IF_ERROR(ParseTrigger(spec, when.substr(0, colon2), f));
  if (colon2 != std::string_view::npos) {
    std::optional<double> d = ParseSeconds(when.substr(colon2 + 1));
    if (!d) return Bad(spec, "bad duration");
    RETURN_IF_ERROR(CheckRange("--fault duration", *d, 0, kMaxFaultSeconds, "s"));
    f.duration_s = *d;
  }
  if (f.kind == FaultKind::kRackManager && f.duration_s != 0) {
    return Bad(spec, "rack-manager is not undone (a standby takes the role): no duration");
  }
  if (f.kind == FaultKind::kEngine && f.duration_s != 0) {
    return Bad(spec, "engine is not undone (its requests are rescheduled): no duration");
  }
  return f;
}

void MeasureRecovery(const ReplayResult& replay, FaultOutcome& o) {
  o.results_before = o.results_during = o.results_after_cut_off = 0;
  o.scheduler_resubmissions = o.requests_resubmitted = 0;
  o.recovery_s.reset();
  for (const RequestRecord& r : replay.records) {
    o.scheduler_resubmissions += r.result.attempt();
    o.requests_resubmitted += r.result.attempt() > 0 ? 1 : 0;
  }
  if (!o.injected) return;
  for (const RequestRecord& r : replay.records) {
    // When the request completed: the decode engine's stamp (the replayer may receive it later:
    // its thread runs the fault's commands), else when the replayer received it.
    const Nanos done = r.result.timing().done_ns() > 0 ? r.result.timing().done_ns() : r.result_ns;
    if (done < o.start_ns) {
      ++o.results_before;
    } else if (done < o.end_ns) {
      ++o.results_during;
      if (o.cut_off_ns > 0 && done >= o.cut_off_ns) ++o.results_after_cut_off;
    } else if (!o.recovery_s || ToSeconds(done - o.end_ns) < *o.recovery_s) {
      o.recovery_s = ToSeconds(done - o.end_ns);
    }
  }
}

}  // namespace dualpath::replay
