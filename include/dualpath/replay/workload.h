// Replay workloads: agent sessions whose every turn carries real token ids, ready to submit to the
// scheduler service (docs/replay.md, docs/e2e.md "Teacher forcing").
//
// A source (the synthetic Table-2 generator, the shipped WEKA Claude Code sessions, the shipped
// Mooncake conversations, or any trace file trace::ReadTrace accepts) gives the *shape*: how many
// turns an agent runs, and the relative sizes of its first prompt, appends and generations.
// ShapeWorkload scales that shape to fit the emulated cluster: the first prompt to about half of
// --max-context, later appends to a mean of --append tokens, generations to a mean of --gen, then
// cuts each agent at --max-context tokens and --turns turns. Recorded hash ids and compactions are
// dropped (every prompt extends the previous context, Appendix A.3), so token ids are a function of
// (agent, position) (trace::PromptTokenIds) and the recorded output positions — the teacher tokens
// a decode engine feeds — are exactly the tokens the next prompt starts with.
//
// The "compute" source is the synthetic shape with long appends (default 512): prefill compute,
// not KV loading, dominates (acceptance 3).
//
// The "codex" source is shaped like Codex agentic coding sessions (seed 003, vLLM x Mooncake: a
// shared system prompt, a long first input, appends of ~2K tokens, ~30 turns): every agent runs
// --turns turns (default 30), its first prompt is --max-context / 2 tokens of which the first
// --shared-prefix (default --max-context / 4) are the SAME token ids for every agent (a system
// prompt: position p < shared prefix holds the shared stream's token p, every later position the
// agent's own stream), then appends of mean --append (default 2048) and generations of mean --gen.
// Token ids stay a function of (agent, position), so the invariants above hold; in addition the
// first shared-prefix tokens of every agent's every prompt are equal across agents (their KV
// blocks have the same names: a cross-agent hit).
//
// The "static" source is TraCT's static workload (seed 002 §5): fixed sizes instead of a shape,
// to control the KV volume a request moves. Agent k's first prompt is 1,500, 3,000, 4,500 or
// 6,000 tokens (kStaticInputTokens[k % 4]) and every turn generates 3 tokens; with --turns > 1
// each later turn appends --append tokens (so it reloads the whole previous context: a prefix
// hit). --max-context does not cut it (the sizes are the point); --gen is ignored.
//
// Thread safety: pure functions; results are plain values owned by the caller.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/trace/workload.h"

namespace dualpath::replay {

// Input ranges (docs/replay.md "Input ranges"), checked by ShapeWorkload / BuildWorkload.
inline constexpr uint32_t kMaxAgents = 100'000;    // concurrent clients of a few-node testbed
inline constexpr uint32_t kMaxTurns = 10'000;      // longer than any recorded session
inline constexpr uint32_t kMaxContext = 1u << 20;  // 1M tokens: the longest context of any model
inline constexpr uint64_t kMaxWorkloadTokens = 1ull << 28;  // agents x turns x max_context: 1 GiB

// The "static" source's first-prompt sizes and generation (TraCT §5).
inline constexpr std::array<uint32_t, 4> kStaticInputTokens = {1500, 3000, 4500, 6000};
inline constexpr uint32_t kStaticGenTokens = 3;

struct WorkloadOptions {
  // "synthetic", "compute", "codex", "static", "weka", "mooncake", or a path (file or directory)
  // for trace::ReadTrace.
  std::string source = "synthetic";
  uint32_t agents = 4;
  uint32_t turns = 6;           // at most this many turns per agent
  uint32_t append = 24;         // mean append of turns after the first (tokens)
  uint32_t gen = 16;            // mean tokens generated per turn
  uint32_t max_context = 3072;  // no turn's prompt + generation exceeds this
  uint64_t seed = 1;
  uint32_t vocab = 4096;  // token ids are < vocab (the model's)
  // Directory holding traces/weka-claude-code and traces/mooncake (empty: DataDir()).
  std::string data_dir;
  // "codex" only: tokens of the system prefix every agent's prompts share, in [1, max_context / 2]
  // (the first prompt's length); 0: max_context / 4. Any other source refuses a non-zero value.
  uint32_t shared_prefix = 0;
};

// Which options the command line set (WithSourceDefaults leaves those alone).
struct GivenOptions {
  bool append = false;
  bool turns = false;
};

// Defaults for a source: "compute" gets append = 512 and "codex" append = 2048 and turns = 30,
// each unless the command line set it (`given`); the others keep WorkloadOptions' defaults.
WorkloadOptions WithSourceDefaults(WorkloadOptions o, GivenOptions given);

// The tokens of the prefix every agent's prompts share: "codex": shared_prefix, or
// max_context / 4 when 0; every other source: 0.
uint32_t SharedPrefixTokens(const WorkloadOptions& o);

// The repository's data/ directory: $DUALPATH_DATA_DIR if set, else the source tree's (compiled
// in).
std::string DataDir();

// One request: turn `turn` of agent `agent`.
struct TurnSpec {
  uint32_t turn = 0;
  std::vector<uint32_t> prompt;   // every prompt token id
  uint32_t gen_tokens = 0;        // exactly this many are generated
  std::vector<uint32_t> teacher;  // the recorded output tokens fed to decode (gen_tokens - 1)
  uint64_t context_tokens = 0;    // prompt tokens carried over from the previous turn
};

struct Agent {
  uint64_t id = 0;
  std::vector<TurnSpec> turns;
};

struct ReplayWorkload {
  std::string name;  // "synthetic", "weka:<dir>", ...
  std::vector<Agent> agents;
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;   // summed over requests
  uint64_t context_tokens = 0;  // summed over requests (the ideal hits, before block rounding)
  uint64_t gen_tokens = 0;      // summed over requests
  // Leading tokens of every prompt that are equal across agents (SharedPrefixTokens; "codex"),
  // 0 for the other sources. Hits on them across agents are not in context_tokens.
  uint64_t shared_prefix_tokens = 0;
};

// The scaled, token-less sessions (trace::Workload) for `o`: see the file comment. Errors:
// kInvalidArgument naming the option (zero agents, turns, gen, vocab; max_context < 64; an
// unknown source that is not a readable trace), or the trace reader's error.
Result<trace::Workload> ShapeWorkload(const WorkloadOptions& o);

// ShapeWorkload plus token ids: prompt = trace::PromptTokenIds, teacher = the positions after
// the prompt that the next prompt holds (computed past the last turn too).
Result<ReplayWorkload> BuildWorkload(const WorkloadOptions& o);

// Token ids of one shaped session's turn i (prompt and teacher), exposed for tests. Positions
// below `shared_prefix` hold the shared stream (SharedPrefixTokenIds), the rest the session's.
TurnSpec MakeTurnSpec(const trace::Session& s, size_t i, uint32_t vocab,
                      uint64_t shared_prefix = 0);

// The first n tokens of the stream every agent's shared prefix is made of (ids < vocab).
std::vector<uint32_t> SharedPrefixTokenIds(uint64_t n, uint32_t vocab);

}  // namespace dualpath::replay
