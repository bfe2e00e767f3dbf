// Agentic workloads: sessions of turns, where each turn's prompt is the previous context plus a
// few newly appended tokens (DualPath paper, Appendix A.3).
//
// A Workload is a plain value produced by a reader (Mooncake JSONL, WEKA Claude Code sessions) or
// by the synthetic generator (DualPath Table 2 shaped); the caller owns it. Replay semantics:
//   context(0)  = 0
//   prompt(i)   = context(i) + append(i)          (the prompt extends the previous context)
//   context(i+1)= min(keep(i+1), prompt(i) + gen(i))  (keep = all, except recorded compactions)
//   the model generates exactly gen(i) tokens.
// Hits (HitTokens) are the full blocks of the previous context, i.e. the cache of this session
// only (DualPath A.4: hits occur within a trajectory). Traces that carry hash ids (Mooncake, WEKA
// sub-agents) may also hit blocks of other sessions; IdealHitTokens and ComputeStats handle both.
// Token ids for a turn: dualpath/trace/tokens.h. File formats: docs/formats/trace.md.
//
// Thread safety: all functions are pure (no global state); a const Workload may be read from any
// number of threads.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath::trace {

// Turn::keep_tokens value meaning "the prompt keeps the whole previous context" (Appendix A.3).
inline constexpr uint64_t kKeepAll = std::numeric_limits<uint64_t>::max();

// One request of a session.
struct Turn {
  uint64_t append_tokens = 0;  // new prompt tokens this turn (prompt = previous context + append)
  uint64_t gen_tokens = 0;     // tokens to generate (exactly)
  double think_time_s = 0;     // delay after the previous turn's completion (closed loop)
  double arrival_s = -1;       // absolute arrival time for open-loop traces (Mooncake), else -1
  // Optional prompt block ids (traces that carry them): block k covers prompt tokens
  // [k * block_size, (k + 1) * block_size). Equal ids mean equal token blocks. The ids of a
  // Workload form one namespace (ReadWekaDir separates files whose ids are per-file).
  std::vector<uint64_t> hash_ids;
  // How many tokens of the previous context this prompt keeps. kKeepAll except where a recorded
  // trace's context shrank (a Claude Code compaction): then the prompt is the first keep_tokens
  // tokens of the previous context plus append_tokens.
  uint64_t keep_tokens = kKeepAll;
};

inline constexpr uint64_t kNoParent = std::numeric_limits<uint64_t>::max();

struct Session {
  uint64_t id = 0;     // unique within the Workload
  double start_s = 0;  // when the first turn may be sent (closed loop: plus its think time)
  std::vector<Turn> turns;
  // Tokens per hash id (Mooncake 512, WEKA 64); synthetic sessions record SyntheticSpec's.
  uint32_t block_size = 64;
  // Sub-agents (WEKA Claude Code): the session that spawned this one, and the index of the
  // parent's turn whose response launched it (0 also when it started before the parent's first
  // turn); the parent's next turn waits for the sub-agent in the recording (its think time
  // includes the wait), so replay may treat it as an independent session starting at start_s.
  uint64_t parent_id = kNoParent;
  uint32_t parent_turn = 0;
};

struct Workload {
  std::string name;  // "synthetic-64K", "mooncake:<file>", "weka:<dir>"
  std::vector<Session> sessions;
};

// --- Replay helpers (Appendix A.3) -------------------------------------------------------------

// Tokens of context before turn i's append (0 for i == 0). Precondition: i < turns.size().
uint64_t ContextTokens(const Session& s, size_t i);
// Prompt tokens of turn i = ContextTokens(s, i) + append.
uint64_t PromptTokens(const Session& s, size_t i);
// Prompt tokens whose KV-cache exists from earlier turns of the same session: the full blocks of
// the previous context, floor(ContextTokens / block_size) * block_size. block_size > 0.
uint64_t HitTokens(const Session& s, size_t i, uint32_t block_size);
// Context after the last turn completes (its prompt plus its generated tokens).
uint64_t TotalTokens(const Session& s);
// ContextTokens for every turn in one pass (size turns + 1; the last entry is TotalTokens). Use
// this when walking a whole session: ContextTokens(s, i) alone is O(i).
std::vector<uint64_t> Contexts(const Session& s);

// --- Synthetic DualPath trajectories (Table 2) -------------------------------------------------

struct SyntheticSpec {
  // MaxLen in K tokens (1K = 1024). 32, 48 and 64 are fitted to Table 2; other values interpolate
  // between / extrapolate from those rows (docs/trace.md).
  uint32_t max_len_k = 64;
  uint32_t sessions = 500;
  uint64_t seed = 1;
  uint32_t block_size = 64;  // recorded in Session::block_size
};
// Deterministic for a spec. Errors (kInvalidArgument): max_len_k outside [8, 1024], sessions 0,
// sessions x max_len_k above kMaxSyntheticSessionsTimesLenK (memory grows with it: ~1 GB there).
inline constexpr uint64_t kMaxSyntheticSessionsTimesLenK = 100'000 * 64;
Result<Workload> GenerateSynthetic(const SyntheticSpec& spec);

// DualPath §7 (Figure 9): multiply every turn's append by append_factor and generation by
// gen_factor (rounded, at least 1 token), then truncate each trajectory at max_len_tokens: turns
// from the first one whose prompt + generation would exceed it are dropped (a first turn that
// alone exceeds it is clipped, so no session becomes empty). Errors (kInvalidArgument): factors
// not in (0, 1000], max_len_tokens < 2, or sessions with hash ids or compactions (their ids
// would no longer describe the prompts).
Result<Workload> ScaleTurns(const Workload& w, double append_factor, double gen_factor,
                            uint64_t max_len_tokens);

// --- Readers ------------------------------------------------------------------------------------
// Malformed input gives Code::kTraceMalformed with "file:line: what was wrong"; a missing file
// gives kNotFound.
//
// Input ranges (docs/trace.md "Input ranges"), checked where each field is parsed; a value outside
// is malformed input naming the field:
//   - prompt and generated tokens of one request: [1, kMaxTraceTokens] / [0, kMaxTraceTokens]
//     (2^30: no model's context comes near, and a session's sums of up to 2^32 turns of them
//     stay far inside 64 bits, so the replay helpers' arithmetic cannot wrap);
//   - every time (WEKA "t" and "think_time", Mooncake "timestamp"/1000): [0, kMaxTraceSeconds]
//     (1e6 s, 11.6 days: the longest public traces span a week; a larger value is not a
//     measurement, and simulated time grows with it).
inline constexpr uint64_t kMaxTraceTokens = uint64_t{1} << 30;
inline constexpr double kMaxTraceSeconds = 1e6;

// One request per line; each request is its own one-turn session arriving at timestamp/1000 s
// (open loop); hash_ids give cross-request hits.
Result<Workload> ReadMooncakeJsonl(const std::string& path);
// Groups the one-turn sessions of ReadMooncakeJsonl into conversations: a request continues the
// conversation whose latest prompt's full blocks (at least kMinChainBlocks of them, so that a
// shared system prompt alone links nothing) are a prefix of its hash ids; Mooncake's ids are
// prefix-chained, so the last full block's id identifies the whole prefix. Turns keep their
// recorded arrival_s (open loop) and reproduce the recorded prompt lengths: a turn extends the
// whole previous context when its prompt is at least previous prompt + output, else it keeps the
// matched full blocks (keep_tokens). Errors (kInvalidArgument): a session that is not a one-turn
// request with hash ids and arrival_s.
inline constexpr uint32_t kMinChainBlocks = 2;
Result<Workload> InferMooncakeSessions(const Workload& requests);

// One trace_NNNN.json Claude Code session; nested sub-agents become extra sessions with parent_id
// set, sharing the parent's hash-id namespace.
Result<Workload> ReadWekaSession(const std::string& path);
// Every *.json file in dir (trace_NNNN.json), in file-name order.
Result<Workload> ReadWekaDir(const std::string& dir);
// Any of the above by path: a directory → ReadWekaDir, "*.jsonl" → Mooncake, "*.json" → WEKA
// session. format "mooncake" or "weka" overrides the guess; "auto" guesses. Errors: kNotFound for
// a missing path, kInvalidArgument for an unknown format or extension.
Result<Workload> ReadTrace(const std::string& path, const std::string& format = "auto");

// --- Statistics ---------------------------------------------------------------------------------

// Means are per session unless named per request. Definitions follow DualPath Table 2 (see
// docs/trace.md): a session's Append / Gen are its per-turn means; Total its final context;
// Context its mean prompt length; the table's value is the mean over sessions.
struct WorkloadStats {
  uint64_t sessions = 0;
  uint64_t turns = 0;             // total requests
  double turns_per_session = 0;   // Table 2 "Turns"
  double append_mean = 0;         // Table 2 "Append" (mean over sessions of per-turn means)
  double gen_mean = 0;            // Table 2 "Gen"
  double total_mean = 0;          // Table 2 "Total" (final context per session)
  double context_mean = 0;        // Table 2 "Context" (mean over sessions of mean prompt)
  double append_per_request = 0;  // pooled over all requests
  double gen_per_request = 0;     // pooled over all requests
  double prompt_per_request = 0;  // pooled over all requests
  uint64_t prompt_tokens = 0;     // sum over requests
  uint64_t hit_tokens = 0;        // ideal (infinite cache) hits, sum over requests
  double ideal_hit_ratio = 0;     // hit_tokens / prompt_tokens
  // Mean over sessions of each session's hit tokens / prompt tokens. Table 2's definitions are
  // per-session means, and its "hit rate ~98.7%" at 64K matches this (and 1 - Append/Context)
  // rather than the pooled ratio, which long small-turn sessions dominate.
  double session_hit_ratio_mean = 0;
  uint64_t prompt_blocks = 0;        // sum over requests of ceil(prompt / block)
  uint64_t hit_blocks = 0;           // sum over requests of hit blocks
  double ideal_block_hit_ratio = 0;  // hit_blocks / prompt_blocks (the Mooncake README's figure)
  uint32_t block_size = 0;           // the block size the hits were counted in
  // Spread of turns per session (non-empty sessions; lower median). The longest session is the
  // critical path of an offline batch that runs it (docs/sim.md).
  uint64_t turns_median = 0;
  uint64_t turns_max = 0;
};
// Ideal (infinite prefix cache) hit tokens of every turn: result[s][i] for w.sessions[s].turns[i].
// Sessions with hash ids hit the longest prefix of their hash ids already seen in any session
// (requests ordered by arrival_s, closed-loop sessions by start_s plus cumulative think time),
// counted in the session's own block_size and capped at the prompt; sessions without hash ids hit
// HitTokens(s, i, block_size). Use this, not HitTokens, for traces whose hits cross sessions
// (Mooncake). block_size > 0.
std::vector<std::vector<uint64_t>> IdealHitTokens(const Workload& w, uint32_t block_size);

// Ideal hit ratio: hits as IdealHitTokens. block_size > 0.
WorkloadStats ComputeStats(const Workload& w, uint32_t block_size);

}  // namespace dualpath::trace
