// CostModel: GPU and link times for one model on one hardware configuration.
//
// All times in seconds, sizes in bytes. Prefill time comes from FLOP counts (kv::ModelGeometry)
// divided by peak throughput times a fitted efficiency; decode time from the larger of FLOPs and
// HBM traffic plus a fixed per-step overhead. docs/sim.md explains each constant.
//
// Thread safety: immutable after construction.
#pragma once

#include <algorithm>
#include <cstdint>

#include "dualpath/kv/model.h"
#include "dualpath/sim/config.h"

namespace dualpath::sim {

class CostModel {
 public:
  // Model-derived engine fields still negative in `config` are resolved (ResolveEngine).
  CostModel(const SimConfig& config, const kv::ModelGeometry& model);

  const kv::ModelGeometry& model() const { return model_; }
  double kv_bytes_per_token() const { return kv_bytes_per_token_; }
  uint32_t layers() const { return model_.num_layers; }

  // Attention time of one request chunk in a prefill forward (all layers).
  double PrefillAttentionTime(uint64_t cached, uint64_t new_tokens) const {
    return attn_cost_.Flops(cached, new_tokens) / attn_flops_per_s_;
  }
  // Linear (GEMM) time of a prefill forward with `tokens` tokens per GPU (all layers). GEMM
  // efficiency grows with the batch: eff(t) = linear_efficiency * t / (t + linear_half_tokens).
  double PrefillLinearTime(double tokens) const {
    if (tokens <= 0) return 0;
    return linear_flops_per_token_ * (tokens + linear_half_tokens_) / linear_flops_per_s_;
  }
  // Fixed per-forward overhead (all layers).
  double ForwardOverhead() const { return forward_overhead_s_; }

  // Bytes per second one GPU can move between a DRAM buffer and its HBM (or to a peer's buffer)
  // over its CNIC in the low-priority class, capped by PCIe.
  double kv_link_bytes_per_s() const { return kv_link_bytes_per_s_; }
  // Storage NIC read rate per node.
  double snic_bytes_per_s() const { return snic_bytes_per_s_; }

  // Per-request decode costs per step (the simulator evaluates them where a request joins a decode
  // batch and again where it completes).
  // model().DecodeFlopsPerToken(context), the same doubles, from the constants kept here.
  double DecodeFlopsPerStep(uint64_t context) const {
    return linear_flops_per_token_ * 1.0 + attn_cost_.Flops(context, 1);
  }
  double DecodeKvBytesPerStep(uint64_t context) const { return model_.DecodeKvBytesRead(context); }
  // Step time of one decode GPU with these sums; the EP group steps at its slowest member.
  double DecodeGpuTime(double flops, double kv_bytes, uint32_t requests) const {
    if (requests == 0) return 0;
    double compute = flops / decode_flops_per_s_;
    double memory = (decode_weight_bytes_ + kv_bytes) / decode_hbm_bytes_per_s_;
    return std::max(compute, memory);
  }
  double decode_overhead_s() const { return decode_overhead_s_; }

  double pe_kv_capacity_bytes() const { return pe_kv_capacity_bytes_; }
  double de_kv_capacity_bytes() const { return de_kv_capacity_bytes_; }

 private:
  CostModel(const SimConfig& resolved, const kv::ModelGeometry& model, int);

  kv::ModelGeometry model_;
  kv::AttentionCost attn_cost_;  // model_.AttentionCostOf(), kept (issue 27)
  double kv_bytes_per_token_;
  double attn_flops_per_s_;
  double linear_flops_per_s_;
  double linear_flops_per_token_;
  double linear_half_tokens_;
  double forward_overhead_s_;
  double kv_link_bytes_per_s_;
  double snic_bytes_per_s_;
  double decode_flops_per_s_;
  double decode_hbm_bytes_per_s_;
  double decode_weight_bytes_;
  double decode_overhead_s_;
  double pe_kv_capacity_bytes_;
  double de_kv_capacity_bytes_;
};

}  // namespace dualpath::sim
