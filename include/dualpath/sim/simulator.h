// The DualPath cluster simulator: a discrete-event model of a PD-disaggregated cluster (prefill
// and decode nodes, storage NICs, compute NICs, HBM, DRAM buffers) replaying an agentic workload
// under one of the paper's systems (Basic, DualPath, Oracle, and the ablation steps).
//
// Granularity (why it is fast): events are per request and per forward batch, never per layer or
// per decode token. A prefill forward batch of an expert-parallel group is one event whose
// duration is the analytic layerwise pipeline (load of layer i+1 overlapped with compute of layer
// i). Decode groups advance analytically: between membership changes the step time is constant,
// so a request's completion is one event. Storage NICs are FIFO fluid servers whose utilization
// is binned over time.
//
// Who owns what: Simulate() owns all state for one run; the caller owns the workload and config.
// Thread safety: Simulate() is reentrant (no globals); separate runs may go on separate threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/huge_pages.h"
#include "dualpath/common/status.h"
#include "dualpath/kv/model.h"
#include "dualpath/sched/routing.h"
#include "dualpath/sched/system.h"
#include "dualpath/sim/config.h"
#include "dualpath/trace/workload.h"

namespace dualpath::sim {

// The systems of DualPath §7.2 and the ablation steps of §7.5: one definition for the simulator
// and the cluster (names, parsing, scheduler presets, the Oracle rule), dualpath/sched/system.h.
using sched::SystemKind;
using sched::SystemName;

struct ClusterShape {
  uint32_t prefill_nodes = 2;
  uint32_t decode_nodes = 4;
};
// "2P4D" -> {2, 4}. kInvalidArgument for anything else (0P2D, 2X4D, "").
Result<ClusterShape> ParseClusterShape(std::string_view text);
// {2, 4} -> "2P4D".
std::string ClusterShapeName(ClusterShape shape);

struct RunSpec {
  SystemKind system = SystemKind::kDualPath;
  ClusterShape shape;
  bool online = false;
  double aps = 0;  // online: Poisson agent arrival rate (agents per second)
  // Online: agents to run (0 = one per workload session). More agents than sessions reuse the
  // sessions cyclically, so a fixed arrival horizon can be simulated at any rate.
  uint64_t online_agents = 0;
  uint64_t seed = 1;  // online arrival times
  // Workload scaling (for future what-if studies; 1 = the trace as given).
  double append_scale = 1;
  // Which prefill engine (GPU) takes an agent's turn (dualpath/sched/routing.h): the system's own
  // choice, or fixed by (agent, turn) over every PE (prefill node order, then GPU). The simulated
  // storage holds every block for every engine, so routing changes where reads and prefill
  // happen (load balance), not the hits.
  sched::Routing routing = sched::Routing::kDualPath;
};

// Where one agent's time went, summed over its turns. For a closed-loop agent, finish_s - start_s
// = to_first_token_s + decode_s + the think time between its turns.
struct AgentPath {
  uint64_t agent = 0;  // index in run order
  uint64_t turns = 0;
  uint64_t generated_tokens = 0;
  double start_s = 0, finish_s = 0;
  // Arrival to first token: scheduling, KV reads, waiting for and running prefill batches.
  double to_first_token_s = 0;
  // First token to last: prompt KV to the DE (buffer, HBM) and the decode steps.
  double decode_s = 0;
};

// Requests no engine of the simulated cluster can hold (sched::CheckTooLong), refused on arrival
// as a serving engine refuses a prompt longer than its maximum; the agent's session goes on with
// its next turn. Real traces contain them: the longest WEKA Claude Code prompts (838K tokens) do
// not fit a Basic PE's HBM (docs/sim.md "Requests too long for an engine").
struct TooLongRequests {
  uint64_t requests = 0;  // refused, = prefill + decode
  uint64_t prefill = 0;   // prompt > prefill_capacity_tokens
  uint64_t decode = 0;    // prompt + generation > decode_capacity_tokens
  // KV tokens one PE holds in HBM without layerwise prefill; 0 = no limit (layerwise prefill
  // holds one layer at a time).
  int64_t prefill_capacity_tokens = 0;
  int64_t decode_capacity_tokens = 0;  // KV tokens one DE reserves for its requests
};

struct SimResult {
  std::string system;
  uint64_t requests = 0;  // served; requests too long for any engine are in too_long
  TooLongRequests too_long;
  uint64_t agents = 0;
  double jct_s = 0;  // offline: last completion; online: also reported (makespan)
  double mean_agent_jct_s = 0;
  // Online: over requests arriving in the steady window (after the first half of the arrival
  // span, before the last agent arrives) so warm-up and drain do not dilute a growing queue.
  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p99_s = 0;
  double ttst_mean_s = 0;
  double tpot_mean_s = 0;
  // Storage-NIC read traffic, busiest NIC over mean NIC per window, traffic-weighted over the
  // windows of the loaded phase (config.balance_phase_fraction); and the plain mean of ratios.
  double snic_max_over_avg = 0;
  double snic_max_over_avg_unweighted = 0;
  double attn_max_over_avg = 0;  // attention time across a prefill EP group, mean over steps
  // The agent that finished last. Offline its finish is the JCT, so this is the critical path no
  // throughput gain shortens: its turns one after the other, each a prefill then a decode.
  AgentPath last_agent;
  double snic_read_bytes = 0;
  double snic_avg_utilization = 0;  // read bytes / (nodes x rate x jct)
  // Prefill EP groups' forward time / (groups x jct): how busy the prefill GPUs were.
  double prefill_busy_fraction = 0;
  uint64_t events = 0;
  // Width of the windows below: config.snic_window_s, doubled as often as needed to keep a long
  // run within 65,536 windows (memory bounded by the workload, not by simulated time).
  double window_s = 0;
  // Storage-NIC read utilization (0..1) per node per window of window_s; nodes are prefill nodes
  // first. For plots.
  std::vector<std::vector<float>> snic_util;
  std::vector<bool> node_is_prefill;
  // Per window of window_s: requests in decode per decode GPU (time-weighted mean) and
  // the decode step time of the groups that were decoding (ms, time-weighted; 0 when none was).
  // For plots and for checking what paces the decode side (docs/sim.md).
  std::vector<float> decode_batch_per_gpu;
  std::vector<float> decode_step_ms;
};

// A workload in the compact form the simulator replays: per agent, per turn, the hit (cached)
// prompt tokens, the prompt tokens and the tokens to generate (Appendix A.3 replay semantics).
struct SimTurn {
  uint32_t hit = 0;
  uint32_t prompt = 0;
  uint32_t gen = 0;
  float think_s = 0;
  double arrival_s = -1;  // open-loop absolute arrival, else -1 (closed loop)
};
struct SimAgent {
  double start_s = 0;
  uint32_t first_turn = 0;  // index into SimWorkload::turns
  uint32_t num_turns = 0;
};
struct SimWorkload {
  std::vector<SimAgent> agents;
  // Read one entry per arrival at an unrelated place (every agent is at its own turn): in huge
  // pages, the largest table of a run misses the TLB far less (common/huge_pages.h, issue 27).
  HugePageVector<SimTurn> turns;
};
// Converts (and checks: no turn with an empty prompt and no generation). block_tokens is the
// persisted block size that hits are counted in.
Result<SimWorkload> CompactWorkload(const trace::Workload& w, uint32_t block_tokens);

// DualPath Appendix A.3: the paper's datasets hold 500 trajectories and "to generate additional
// agent trajectories, we sample an existing trajectory". Returns `agents` agents, each replaying
// a trajectory of `base` drawn uniformly with a seeded RNG (agents share the turn records).
SimWorkload SampleAgents(const SimWorkload& base, uint64_t agents, uint64_t seed);

// At most this many GPUs per simulated cluster (kInvalidArgument otherwise).
inline constexpr uint64_t kMaxSimGpus = uint64_t{1} << 20;
// At most this many agents per run (`--agents`, and the agents --find-max-aps runs at a rate):
// agent records are ~100 B each, ~1 GB at most (docs/sim.md "Input ranges").
inline constexpr uint64_t kMaxSimAgents = 10'000'000;

Result<SimResult> Simulate(const SimConfig& config, const kv::ModelGeometry& model,
                           const SimWorkload& workload, const RunSpec& spec);

}  // namespace dualpath::sim
