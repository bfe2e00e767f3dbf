// The reference model's weights and how they are generated from the seed (private to src/model).
//
// Every tensor has its own splitmix64 stream (dualpath/common/splitmix.h), keyed by (seed,
// tensor id), so a tensor's values do not depend on the order in which tensors are generated or
// on the other tensors' sizes. A value is u = (top 24 bits of the stream word) * 2^-24, mapped to
// (2u - 1) * scale: integer arithmetic and IEEE-exact float operations only (no <random>
// distributions, whose outputs are implementation-defined), so the weights are bit-identical on
// every machine and compiler. Matrices are row-major [out][in], so each output element is one
// contiguous dot product.
#pragma once

#include <cstdint>
#include <vector>

#include "dualpath/model/ref_model.h"

namespace dualpath::model {

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden] RMSNorm gain before attention
  std::vector<float> wqkv;       // [q_dim + 2 * kv_dim][hidden]: Q rows, then K rows, then V rows
  std::vector<float> wo;         // [hidden][q_dim]
  std::vector<float> mlp_norm;   // [hidden] RMSNorm gain before the MLP
  std::vector<float> w_gate_up;  // [2 * ffn][hidden]: gate rows, then up rows
  std::vector<float> w_down;     // [hidden][ffn]
};

struct RefModel::Weights {
  std::vector<float> embedding;  // [vocab][hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [vocab][hidden]
  // Rotary inverse frequencies theta^(-2i / head_dim), i < head_dim / 2, in double so the angle
  // position * inv_freq stays accurate at long contexts before cos/sin round it to float.
  std::vector<double> inv_freq;

  static Weights Generate(const RefModelConfig& config);
};

}  // namespace dualpath::model
