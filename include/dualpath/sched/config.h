// Scheduler parameters and policy switches, in one struct with the paper's defaults.
//
// The policies cover DualPath itself and the baselines and ablation steps of §7:
//   DualPath            load-aware engine choice (§6.1) + read on the side with the shorter queue
//   DualPath, RR side   load-aware engine choice + read side alternating PE/DE (ablation step 3)
//   Basic               load-aware engine choice + PE read path only (no dual-path loading)
//   Oracle              not a scheduler policy: the simulator skips I/O and uses DualPath's
// plus, beyond the paper, `split_reads`: when both sides' read queues are long, one request's hit
// tokens are split across both sides so that both queues end up equally long (the paper's stated
// future work, §6.1 "KV-Cache Read Task Scheduling").
//
// Thresholds are in tokens, as in the paper. A.4 sets the short read queue threshold to the tokens
// a node can read in a fixed time and the unfinished token limit to the tokens one GPU can process
// in a fixed time, "profiled in advance"; the durations were lost from the paper text we have, so
// ThresholdsFromProfile() takes them as arguments and the defaults here are our choice (documented
// in docs/sched.md).
//
// Ownership: plain value. Thread safety: value.
#pragma once

#include <cstdint>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"

namespace dualpath::sched {

// Which side reads a request's hit tokens from storage.
enum class ReadSidePolicy : uint8_t {
  kPrefillOnly,   // Basic: PE read path only
  kRoundRobin,    // ablation: alternate PE, DE, PE, ... over requests with hits
  kShorterQueue,  // DualPath §6.1: the side whose node has the shorter disk read queue
};

// How PEs and DEs are chosen.
enum class EnginePolicy : uint8_t {
  kLoadAware,   // DualPath §6.1: PE categories + minimum tokens; DE two-phase
  kRoundRobin,  // cyclic over eligible engines (not overloaded / enough HBM)
};

std::string_view ReadSidePolicyName(ReadSidePolicy p);
std::string_view EnginePolicyName(EnginePolicy p);

// Defaults for ThresholdsFromProfile (our choice; see the header comment).
inline constexpr double kDefaultShortReadQueueSeconds = 1.0;
inline constexpr double kDefaultUnfinishedTokenSeconds = 2.0;

struct SchedConfig {
  // --- inter-engine (§6.1) ---
  // α: a PE whose node's disk read queue is <= this many tokens is "short read queue"
  // (category 2); above it, "long read queue" (category 3). Also the threshold above which both
  // sides count as long for split reads. Default: ~1 s of a 400 Gbps storage NIC at DS 660B's
  // ~40 KiB of KV per token.
  int64_t short_read_queue_tokens = 1'200'000;
  // β: a PE with more unfinished tokens than this is "overloaded" (category 1) and gets no new
  // requests. Default: ~2 s of one H800 GPU prefilling DS 660B agentic prompts (~200K prompt
  // tokens/s, derived from the paper's 2P4D offline run: 10.5G prompt tokens / 3,167 s / 16 PEs).
  int64_t unfinished_token_limit = 400'000;

  EnginePolicy engine_policy = EnginePolicy::kLoadAware;
  ReadSidePolicy read_side = ReadSidePolicy::kShorterQueue;

  // Beyond the paper: split one request's read across both sides when both queues are long.
  bool split_reads = false;
  // Splits fall on multiples of this many tokens so each side reads whole Full Blocks (§A.5).
  int64_t block_tokens = 64;

  // Layerwise prefill on/off (ablation). The scheduler itself does not use it; the simulator and
  // engines read it from here so one config describes a run. When off, engines should pass their
  // HBM KV capacity as BatchLimits::max_batch_kv_tokens to PackBatch.
  bool layerwise_prefill = true;

  // --- intra-engine (§6.2) ---
  // Compute quota: upper bound on the predicted attention-layer time of one forward batch
  // (A.4: 300 ms).
  Nanos compute_quota = 300 * kNanosPerMilli;
  // A request is chunked only if the chunk has at least this many tokens (or is its remainder);
  // smaller tail chunks would cost a forward pass for almost no work.
  int64_t min_chunk_tokens = 64;

  // Checks every field; errors are kSchedBadConfig naming the field ("unfinished_token_limit must
  // be > 0, got 0").
  Status Validate() const;

  // The presets of §7 (all with the default thresholds).
  static SchedConfig DualPath();
  static SchedConfig DualPathRoundRobinSide();
  static SchedConfig Basic();
};

// α and β from profiled rates (A.4): α = node_read_tokens_per_s * read_seconds,
// β = gpu_prompt_tokens_per_s * compute_seconds. Errors (kSchedBadConfig) for non-positive inputs.
struct Thresholds {
  int64_t short_read_queue_tokens;
  int64_t unfinished_token_limit;
};
Result<Thresholds> ThresholdsFromProfile(double node_read_tokens_per_s,
                                         double gpu_prompt_tokens_per_s,
                                         double read_seconds = kDefaultShortReadQueueSeconds,
                                         double compute_seconds = kDefaultUnfinishedTokenSeconds);

}  // namespace dualpath::sched
