// ResolveEngine: per-model engine constants from the model geometry (docs/sim.md, "Per-model
// engine constants"). With the defaults, DS 660B on 2P4D resolves to the values the simulator was
// refitted with (docs/sim.md "Calibration": 38.4 GB of weights read per decode step, 42.3 / 66.7 GB
// reserved).
#include <algorithm>
#include <string>

#include "dualpath/sim/config.h"

namespace dualpath::sim {
namespace {

// Checkpoints keep the input embedding and the LM head in BF16 also when the rest is FP8
// (DeepSeek-V3/V3.2's model.safetensors.index.json: embed_tokens and lm_head are BF16).
constexpr double kEmbeddingBytesPerParam = 2;

struct WeightSplit {
  double sharded_gb = 0;          // divided among the EP group's GPUs (routed experts)
  double replicated_gb = 0;       // on every GPU: attention, indexer, shared experts, dense
                                  // layers, router, norms, embeddings
  double input_embedding_gb = 0;  // the part of replicated_gb a decode step does not read
};

// docs/sim.md, "Prefill and decode HBM, line by line". Expert parallelism divides only the routed
// experts; a MoE model without params_routed_experts (a JSON model that does not give it) keeps
// the older rule, all of its parameters divided.
WeightSplit SplitWeights(const kv::ModelGeometry& model, bool moe, double w) {
  WeightSplit s;
  if (moe && model.params_routed_experts <= 0) {
    s.sharded_gb = model.params_total * w / 1e9;
    return s;
  }
  const double routed = moe ? model.params_routed_experts : 0;
  const double embedding = model.params_active - model.params_active_non_embedding;
  const double emb_bytes = std::max(w, kEmbeddingBytesPerParam);
  s.sharded_gb = routed * w / 1e9;
  s.replicated_gb = ((model.params_total - routed - embedding) * w + embedding * emb_bytes) / 1e9;
  s.input_embedding_gb = embedding / 2 * emb_bytes / 1e9;  // input table; the other half: LM head
  return s;
}

}  // namespace

Result<SimConfig> ResolveEngine(const SimConfig& config, const kv::ModelGeometry& model,
                                uint32_t prefill_nodes, uint32_t decode_nodes) {
  SimConfig c = config;
  EngineConfig& e = c.engine;
  // MoE: only a fraction of the parameters is active per token. DeepSeek's MoE checkpoints are
  // FP8; the dense models we carry (Qwen, Llama) are served in BF16/FP16 (paper Table 1).
  const bool moe = model.params_active < model.params_total;
  const double w = e.weight_bytes_per_param > 0 ? e.weight_bytes_per_param : (moe ? 1.0 : 2.0);
  e.weight_bytes_per_param = w;
  if (!moe) {
    // §7.2: "For Qwen 32B, we use DP only": no expert parallelism, every GPU a full replica.
    e.pe_ep_nodes = 1;
    e.de_ep_nodes = 1;
  }
  auto ep_gpus = [&](uint32_t ep_nodes, uint32_t nodes) {
    if (!moe) return 1.0;
    const uint32_t n = nodes > 0 ? std::min(ep_nodes, nodes) : ep_nodes;
    return static_cast<double>(n) * c.hw.gpus_per_node;
  };
  const WeightSplit split = SplitWeights(model, moe, w);
  const double pe_weights_gb =
      split.sharded_gb / ep_gpus(e.pe_ep_nodes, prefill_nodes) + split.replicated_gb;
  const double de_weights_gb =
      split.sharded_gb / ep_gpus(e.de_ep_nodes, decode_nodes) + split.replicated_gb;
  // Decode reads all resident weights every step (with hundreds of tokens per EP group every
  // expert is hit, and a dense model reads all of its weights) except the input embedding, of
  // which it reads one row per token.
  if (e.decode_weight_gb < 0) e.decode_weight_gb = de_weights_gb - split.input_embedding_gb;
  if (e.pe_hbm_reserved_gb < 0) {
    e.pe_hbm_reserved_gb = pe_weights_gb + (moe ? e.ep_pe_workspace_gb : e.dp_workspace_gb);
  }
  if (e.de_hbm_reserved_gb < 0) {
    e.de_hbm_reserved_gb = de_weights_gb + (moe ? e.ep_de_workspace_gb : e.dp_workspace_gb);
  }
  if (e.decode_overhead_ms < 0) {
    e.decode_overhead_ms =
        model.num_layers *
        (e.decode_layer_overhead_us + (moe ? e.decode_moe_layer_overhead_us : 0)) * 1e-3;
  }
  if (e.pe_hbm_reserved_gb >= c.hw.hbm_gb || e.de_hbm_reserved_gb >= c.hw.hbm_gb) {
    return Status(Code::kSimBadConfig,
                  "model " + model.name + ": weights + workspace (" +
                      std::to_string(std::max(e.pe_hbm_reserved_gb, e.de_hbm_reserved_gb)) +
                      " GB per GPU) do not fit in hardware.hbm_gb");
  }
  return c;
}

}  // namespace dualpath::sim
