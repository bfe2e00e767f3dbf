// The values that flow into and out of the inter-engine scheduler (DualPath §6.1): requests in,
// engine status reports in, assignments out.
//
// All sizes are in tokens; the caller converts to bytes with the model's KV bytes per token
// (kv::ModelGeometry). Keeping tokens makes the scheduler model-agnostic and matches the paper,
// which measures queues and thresholds in tokens.
//
// Ownership: plain values. Thread safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "dualpath/common/ids.h"
#include "dualpath/common/status.h"

namespace dualpath::sched {

// One turn of an agent session, as submitted to the scheduler.
struct SchedRequest {
  RequestId id;
  SessionId session;
  // Prompt length (previous context + append), > 0.
  int64_t prompt_tokens = 0;
  // Leading prompt tokens whose KV-cache is in storage and must be read (0 <= hit <= prompt).
  int64_t hit_tokens = 0;
  // Tokens the request is expected to generate (>= 0); reserves decode HBM.
  int64_t expected_gen_tokens = 0;
  // Routing (dualpath/sched/routing.h), beyond the paper: when set, only this prefill engine
  // takes the request (when it is not overloaded; the request waits for it, and requests behind
  // it in the prefill queue may go first); unset, the §6.1 choice. It must name a prefill engine
  // (Scheduler::Submit checks). The decode engine is chosen as for any request.
  std::optional<EngineId> prefill_engine;

  // Tokens the request occupies on a DE (prompt + generation): its HBM need and its contribution
  // to the DE's unfinished tokens.
  int64_t decode_tokens() const { return prompt_tokens + expected_gen_tokens; }

  // kInvalidArgument naming the bad field.
  Status Validate() const;
};

// Requests no engine can ever hold. An engine holds at most a fixed number of KV tokens: a PE its
// prompt (all layers in HBM without layerwise prefill; the buffer of a real engine), a DE the
// prompt plus the generation (SchedRequest::decode_tokens). A request above the largest engine of
// a side would wait forever: phase 2 waits for free HBM that cannot appear, and PackBatch cannot
// fit its prompt. Real traces contain such requests (agentic contexts of 800K tokens), so every
// driver refuses them before Submit, as a serving engine refuses a prompt longer than its
// maximum: the scheduler service fails them with a result naming the sizes (docs/control.md), the
// simulator counts and reports them (docs/sim.md). This is the one rule both use.
enum class TooLong : uint8_t {
  kFits,     // some engine of each side can hold it
  kPrefill,  // prompt > the largest prefill engine's capacity
  kDecode,   // prompt + generation > the largest decode engine's capacity
};
std::string_view TooLongName(TooLong t);  // "fits", "prefill", "decode"
// Capacities in tokens of the largest engine of each side; <= 0 means unbounded (or not known
// yet: it may fit). The prefill side is checked first. Inputs are the request's sizes (>= 0).
TooLong CheckTooLong(int64_t prompt_tokens, int64_t gen_tokens, int64_t prefill_capacity_tokens,
                     int64_t decode_capacity_tokens);

// What an engine reports when its group fetches (§6.1). Each report overwrites the scheduler's
// view of that engine; between reports the scheduler adds what it assigned itself.
struct EngineReport {
  EngineId engine;
  // Requests assigned to the engine that have not completed.
  int64_t unfinished_requests = 0;
  // Total tokens over those requests (PE: prompt tokens; DE: prompt + generated tokens).
  int64_t unfinished_tokens = 0;
  // Disk read queue of the engine's node: hit tokens queued or in flight on the node's storage
  // NIC (all engines of a node report the same value; the last report wins).
  int64_t read_queue_tokens = 0;
  // DE only: free KV capacity in HBM, in tokens (ignored for PEs).
  int64_t hbm_free_tokens = 0;
};

// Who reads a request's hit tokens from storage.
enum class ReadSide : uint8_t {
  kPrefill,  // PE read path: storage -> PE buffer (also used when there is nothing to read)
  kDecode,   // DE read path: storage -> DE buffer -> compute network -> PE
  kSplit,    // beyond the paper: both, prefill_read_tokens + decode_read_tokens = hit_tokens
};

std::string_view ReadSideName(ReadSide side);

// Output of a decode group's fetch: the DE that will decode the request (and hold its KV).
struct DecodeAssignment {
  RequestId request;
  EngineId decode;
  // The request's decode tokens (SchedRequest::decode_tokens(): prompt + expected generation),
  // what the DE now holds for it: a caller can update its view of the engine without looking the
  // request up (the simulator's request records are cold by then, issue 27).
  int64_t tokens = 0;
};

// Output of a prefill group's fetch: the complete inter-engine decision for one request.
struct Assignment {
  RequestId request;
  SessionId session;
  EngineId prefill;
  EngineId decode;
  ReadSide side = ReadSide::kPrefill;
  // Leading hit tokens read by the PE side, then the rest by the DE side. For kSplit the PE reads
  // tokens [0, prefill_read_tokens) and the DE the following decode_read_tokens; both are
  // multiples of SchedConfig::block_tokens except possibly the DE part's tail.
  int64_t prefill_read_tokens = 0;
  int64_t decode_read_tokens = 0;
  // Copied from the request so the caller needs no lookup.
  int64_t prompt_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t expected_gen_tokens = 0;
};

// What one FetchForGroup call produced. Reuse one instance across calls: Clear() keeps capacity,
// so steady-state fetches do not allocate.
struct FetchResult {
  std::vector<DecodeAssignment> decode;  // filled by a decode group's fetch
  std::vector<Assignment> prefill;       // filled by a prefill group's fetch
  void Clear() {
    decode.clear();
    prefill.clear();
  }
};

// Counters for tests, the simulator's report and the CLI. Monotonic since construction.
struct SchedStats {
  int64_t submitted = 0;
  int64_t decode_assigned = 0;
  int64_t prefill_assigned = 0;
  // PE choices by category (§6.1): 2 = short read queue, 3 = long read queue.
  int64_t pe_short_queue = 0;
  int64_t pe_long_queue = 0;
  // Prefill fetches that stopped because every engine of the group was overloaded.
  int64_t pe_fetch_all_overloaded = 0;
  // DE choices: "rest" (not high-token) vs high-token fallback (§6.1 phase 2).
  int64_t de_normal = 0;
  int64_t de_high_token = 0;
  // Decode fetches that stopped because no DE had enough free HBM for the head request.
  int64_t de_fetch_no_hbm = 0;
  int64_t read_prefill = 0;
  int64_t read_decode = 0;
  int64_t read_split = 0;
  int64_t read_tokens_prefill = 0;
  int64_t read_tokens_decode = 0;
};

}  // namespace dualpath::sched
