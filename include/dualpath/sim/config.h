// SimConfig: everything the cluster simulator needs besides the workload.
//
// Four parts: the hardware (DualPath §2.3 / §7.2: nodes of 8 GPUs, a 400 Gbps compute NIC per
// GPU, one 400 Gbps storage NIC per node, storage that saturates every storage NIC, the DRAM
// buffer of Appendix A.4), the engine cost model (GPU time from FLOP counts and memory traffic
// with fitted efficiency factors; docs/sim.md explains every constant and how it was calibrated),
// the scheduler thresholds (§6.1 α and β, §6.2 compute quota), and the online SLO (§7.4).
//
// Defaults are the calibrated values; a JSON file (docs/formats/sim_config.md) overrides any
// subset of them. Unknown keys are errors, so a typo cannot silently leave a default in place.
//
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dualpath/common/status.h"
#include "dualpath/kv/model.h"

namespace dualpath::sim {

struct HardwareConfig {
  uint32_t gpus_per_node = 8;
  double cnic_gbps = 400;         // compute NIC per GPU (line rate, Gbit/s)
  double snic_gbps = 400;         // storage NIC per node, shared by the node's engines
  double snic_efficiency = 0.90;  // achievable fraction of snic line rate (3FS reads)
  double cnic_kv_share = 0.90;    // fraction of the CNIC left to low-priority KV traffic
  double dram_buffer_gb = 80;     // PE/DE buffer per node (Appendix A.4, DeepSeek models)
  double host_mem_gBps = 500;     // host memory bandwidth per node (GB/s), §4.2 M
  double pcie_gBps = 64;          // GPU<->CNIC PCIe per direction (GB/s, Gen5 x16)
  double gpu_bf16_tflops = 989;   // dense BF16 peak (Hopper SXM)
  double gpu_fp8_tflops = 1979;   // dense FP8 peak (linear layers run in FP8)
  double hbm_gb = 80;             // device memory per GPU
  double hbm_tbps = 3.35;         // device memory bandwidth per GPU (TB/s)
};

struct EngineConfig {
  // Prefill (§6.2): efficiency of the FP8 GEMMs (MoE + projections) and of attention kernels.
  double linear_efficiency = 0.40;
  double attention_efficiency = 0.30;
  double linear_half_tokens = 512;  // GEMM efficiency halves at this many tokens per GPU batch
  double layer_overhead_us = 150;   // per layer per forward: EP dispatch/combine latency, launch
  double compute_quota_ms = 300;    // §6.2 / A.4: attention time budget per forward batch
  // Model-dependent constants: a negative value means "derive from the model geometry and the
  // cluster shape" (ResolveEngine below, docs/sim.md "Per-model engine constants"); a config file
  // may still set any of them explicitly.
  double pe_hbm_reserved_gb = -1;  // weights + workspace per prefill GPU
  // Decode: step time = overhead + max(compute, HBM traffic) over the EP group's slowest GPU.
  double decode_overhead_ms = -1;  // per step: launches + (MoE) two all-to-alls per layer
  double decode_compute_efficiency = 0.25;
  double decode_hbm_efficiency = 0.70;
  double de_hbm_reserved_gb = -1;      // weights + workspace per decode GPU
  double decode_weight_gb = -1;        // weight bytes read per step per decode GPU
  double weight_bytes_per_param = -1;  // auto: MoE (DeepSeek, FP8 checkpoints) 1, dense 2 (BF16)
  // What the derivation adds on top of the resident weights (model-independent runtime costs;
  // the replicated weights are counted with the weights, docs/sim.md "HBM, line by line").
  double ep_pe_workspace_gb = 6;         // EP prefill GPU: activations + all-to-all buffers
  double ep_de_workspace_gb = 2;         // EP decode GPU: DeepEP low-latency buffers (~1.9 GB)
  double dp_workspace_gb = 4;            // DP-only (dense) GPU: activations, no all-to-all buffers
  double decode_layer_overhead_us = 25;  // per layer per step: launches, norms, sampling
  double decode_moe_layer_overhead_us = 318;  // per layer per step: EP dispatch + combine (fitted)
  uint32_t max_decode_batch = 128;            // requests per decode GPU
  // Parallelism: expert-parallel groups step in lockstep (§6.2). MoE models use EP over this many
  // nodes; dense models run DP only (§7.2: "For Qwen 32B, we use DP only"), i.e. one node.
  uint32_t pe_ep_nodes = 2;
  uint32_t de_ep_nodes = 4;
  uint32_t block_tokens = 64;  // full-block size persisted during decode (§4.1)
};

struct SchedConfig {
  // §6.1 α: short read queue threshold, in seconds of one node's storage read bandwidth.
  double short_read_queue_s = 1.0;
  // §6.1 β: unfinished-token upper limit, in seconds of one PE's prefill throughput.
  double unfinished_token_limit_s = 2.0;
  // How often each engine group's leader fetches work while requests are pending (§6.1 says
  // "regularly"; the interval is ours).
  double fetch_interval_ms = 20;
};

// The online service-level objective `--find-max-aps` searches against (§7.4: TTFT <= 4 s and
// TPOT <= 50 ms), on the means of the steady window (SimResult::ttft_mean_s / tpot_mean_s).
struct SloConfig {
  double ttft_mean_s = 4.0;
  double tpot_mean_s = 0.050;
};

struct SimConfig {
  HardwareConfig hw;
  EngineConfig engine;
  SchedConfig sched;
  SloConfig slo;
  // Metrics windows.
  double snic_window_s = 1.0;           // storage-NIC max/avg window
  double balance_phase_fraction = 0.5;  // max/avg averaged over the first fraction of the run
  // Synthetic workloads: agents sample this many generated trajectories (the paper's datasets
  // hold 500, Appendix A.3); 0 = one fresh trajectory per agent.
  uint32_t synthetic_trajectories = 500;
  // Offline: agent i's first turn starts at U(0, offline_start_skew_s), seeded (0 = all at t = 0,
  // as the paper's offline runs: "agents start to rollout simultaneously"; docs/sim.md "Start
  // skew"). Agents whose trace records start times keep them.
  double offline_start_skew_s = 0;
  // --find-max-aps: agents arrive over this many simulated seconds at each tried rate.
  double online_horizon_s = 7200;

  // Validates ranges; kSimBadConfig naming the field otherwise.
  Status Validate() const;
};

// Fills the negative ("derive") engine fields from the model geometry (docs/sim.md):
//   w        = weight_bytes_per_param, auto 1 for MoE (params_active < params_total), else 2
//   ep GPUs  = MoE: min(ep_nodes, nodes) x gpus_per_node; dense: 1 (DP, full replica per GPU)
//   resident weights   = params_routed_experts x w / ep GPUs + replicated (all other params, at w;
//                        the embeddings at max(w, 2): BF16 in the checkpoints)
//   decode_weight_gb   = decode resident weights - the input embedding (a row lookup per token)
//   pe/de_hbm_reserved = resident weights per GPU + workspace (EP or DP)
//   decode_overhead_ms = layers x (decode_layer_overhead + MoE ? decode_moe_layer_overhead : 0)
// and, for dense models, pe_ep_nodes = de_ep_nodes = 1. Fields already >= 0 are kept. Nodes of
// 0 mean "unknown shape" (no min() with the node count). kSimBadConfig if the derived weights do
// not fit in HBM (e.g. a dense model too large for one GPU).
Result<SimConfig> ResolveEngine(const SimConfig& config, const kv::ModelGeometry& model,
                                uint32_t prefill_nodes, uint32_t decode_nodes);

// An engine's costs measured on its own hardware instead of derived from GPU peaks: what
// `dualpath model calibrate` measures for the reference CPU model on this machine (docs/sim.md
// "Against the engines"). Times in seconds, for a whole forward or step over all layers; FLOPs
// as kv::ModelGeometry counts them (AttentionFlops, DecodeFlopsPerToken).
struct MeasuredCosts {
  double forward_overhead_s = 0;      // per prefill forward, whatever its size
  double linear_s_per_token = 0;      // per prompt token: projections, MLP
  double attention_s_per_flop = 0;    // per prefill attention FLOP
  double decode_step_overhead_s = 0;  // per decode step, whatever its batch
  double decode_s_per_flop = 0;       // per FLOP of one request's decode step
};

// `config` with the engine cost constants set so that CostModel charges exactly `costs` for
// `model`: the prefill linear and attention rates and per-layer overhead, the decode rate and
// per-step overhead, and no HBM term (a CPU engine's memory traffic is inside its measured
// rates). The hardware links, HBM size and buffers are left as they are. kSimBadConfig when a
// cost is not a positive finite number (overheads may be 0) or the result is out of range.
Result<SimConfig> ApplyMeasuredCosts(SimConfig config, const kv::ModelGeometry& model,
                                     const MeasuredCosts& costs);

// Defaults overridden by the JSON object in `text` (`origin` names it in errors).
Result<SimConfig> ParseSimConfig(std::string_view text, std::string_view origin);
Result<SimConfig> LoadSimConfig(const std::string& path);
// The whole config as a JSON object (what --json writes under "config").
std::string SimConfigToJson(const SimConfig& config);

}  // namespace dualpath::sim
