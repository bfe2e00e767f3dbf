#include "sim/cost_model.h"

namespace dualpath::sim {

namespace {
// Simulate() resolves the model-derived constants for its cluster shape before building the cost
// model; a CostModel built directly (tests, tools) resolves them without a shape.
SimConfig Resolved(const SimConfig& c, const kv::ModelGeometry& model) {
  Result<SimConfig> r = ResolveEngine(c, model, 0, 0);
  return r.ok() ? *r : c;
}
}  // namespace

CostModel::CostModel(const SimConfig& config, const kv::ModelGeometry& model)
    : CostModel(Resolved(config, model), model, 0) {}

CostModel::CostModel(const SimConfig& c, const kv::ModelGeometry& model, int /*resolved*/)
    : model_(model),
      attn_cost_(model.AttentionCostOf()),
      kv_bytes_per_token_(static_cast<double>(model.KvBytesPerToken())),
      attn_flops_per_s_(c.hw.gpu_bf16_tflops * 1e12 * c.engine.attention_efficiency),
      linear_flops_per_s_(c.hw.gpu_fp8_tflops * 1e12 * c.engine.linear_efficiency),
      linear_flops_per_token_(model.LinearFlopsPerToken()),
      linear_half_tokens_(c.engine.linear_half_tokens),
      forward_overhead_s_(c.engine.layer_overhead_us * 1e-6 * model.num_layers),
      kv_link_bytes_per_s_(
          std::min(c.hw.cnic_gbps / 8 * 1e9 * c.hw.cnic_kv_share, c.hw.pcie_gBps * 1e9)),
      snic_bytes_per_s_(c.hw.snic_gbps / 8 * 1e9 * c.hw.snic_efficiency),
      decode_flops_per_s_(c.hw.gpu_bf16_tflops * 1e12 * c.engine.decode_compute_efficiency),
      decode_hbm_bytes_per_s_(c.hw.hbm_tbps * 1e12 * c.engine.decode_hbm_efficiency),
      decode_weight_bytes_(c.engine.decode_weight_gb * 1e9),
      decode_overhead_s_(c.engine.decode_overhead_ms * 1e-3),
      pe_kv_capacity_bytes_((c.hw.hbm_gb - c.engine.pe_hbm_reserved_gb) * 1e9),
      de_kv_capacity_bytes_((c.hw.hbm_gb - c.engine.de_hbm_reserved_gb) * 1e9) {}

}  // namespace dualpath::sim
