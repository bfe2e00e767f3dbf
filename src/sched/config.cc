#include "dualpath/sched/config.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

namespace dualpath::sched {
namespace {

Status BadConfig(std::string message) { return Status(Code::kSchedBadConfig, std::move(message)); }

}  // namespace

std::string_view ReadSidePolicyName(ReadSidePolicy p) {
  switch (p) {
    case ReadSidePolicy::kPrefillOnly:
      return "prefill-only";
    case ReadSidePolicy::kRoundRobin:
      return "round-robin";
    case ReadSidePolicy::kShorterQueue:
      return "shorter-queue";
  }
  return "unknown";
}

std::string_view EnginePolicyName(EnginePolicy p) {
  switch (p) {
    case EnginePolicy::kLoadAware:
      return "load-aware";
    case EnginePolicy::kRoundRobin:
      return "round-robin";
  }
  return "unknown";
}

Status SchedConfig::Validate() const {
  if (short_read_queue_tokens < 0) {
    return BadConfig(
        fmt::format("short_read_queue_tokens must be >= 0, got {}", short_read_queue_tokens));
  }
  if (unfinished_token_limit <= 0) {
    return BadConfig(
        fmt::format("unfinished_token_limit must be > 0, got {}", unfinished_token_limit));
  }
  if (engine_policy != EnginePolicy::kLoadAware && engine_policy != EnginePolicy::kRoundRobin) {
    return BadConfig(
        fmt::format("engine_policy has unknown value {}", static_cast<int>(engine_policy)));
  }
  if (read_side != ReadSidePolicy::kPrefillOnly && read_side != ReadSidePolicy::kRoundRobin &&
      read_side != ReadSidePolicy::kShorterQueue) {
    return BadConfig(fmt::format("read_side has unknown value {}", static_cast<int>(read_side)));
  }
  if (split_reads && read_side != ReadSidePolicy::kShorterQueue) {
    return BadConfig(fmt::format("split_reads needs read_side shorter-queue, got {}",
                                 ReadSidePolicyName(read_side)));
  }
  if (block_tokens <= 0) {
    return BadConfig(fmt::format("block_tokens must be > 0, got {}", block_tokens));
  }
  if (compute_quota <= 0) {
    return BadConfig(fmt::format("compute_quota must be > 0 ns, got {}", compute_quota));
  }
  if (min_chunk_tokens <= 0) {
    return BadConfig(fmt::format("min_chunk_tokens must be > 0, got {}", min_chunk_tokens));
  }
  return Status::Ok();
}

SchedConfig SchedConfig::DualPath() { return SchedConfig{}; }

SchedConfig SchedConfig::DualPathRoundRobinSide() {
  SchedConfig c;
  c.read_side = ReadSidePolicy::kRoundRobin;
  return c;
}

SchedConfig SchedConfig::Basic() {
  SchedConfig c;
  c.read_side = ReadSidePolicy::kPrefillOnly;
  c.layerwise_prefill = false;
  return c;
}

Result<Thresholds> ThresholdsFromProfile(double node_read_tokens_per_s,
                                         double gpu_prompt_tokens_per_s, double read_seconds,
                                         double compute_seconds) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(node_read_tokens_per_s)) {
    return BadConfig(
        fmt::format("node_read_tokens_per_s must be > 0, got {}", node_read_tokens_per_s));
  }
  if (!positive(gpu_prompt_tokens_per_s)) {
    return BadConfig(
        fmt::format("gpu_prompt_tokens_per_s must be > 0, got {}", gpu_prompt_tokens_per_s));
  }
  if (!positive(read_seconds)) {
    return BadConfig(fmt::format("read_seconds must be > 0, got {}", read_seconds));
  }
  if (!positive(compute_seconds)) {
    return BadConfig(fmt::format("compute_seconds must be > 0, got {}", compute_seconds));
  }
  Thresholds t;
  t.short_read_queue_tokens =
      static_cast<int64_t>(std::llround(node_read_tokens_per_s * read_seconds));
  t.unfinished_token_limit = std::max<int64_t>(
      1, static_cast<int64_t>(std::llround(gpu_prompt_tokens_per_s * compute_seconds)));
  return t;
}

}  // namespace dualpath::sched
