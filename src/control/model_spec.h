// The scheduler service's view of the reference model spec: the vocabulary size (to reject bad
// token ids) and the kv::ModelGeometry whose fingerprint names the block store's model directory.
//
// This mirrors model::RefModelConfig::Parse/Geometry (include/dualpath/model/ref_model.h) so the
// service does not need the model's weights code; the keys and the geometry must stay identical
// to the model component's (name "ref", MHA when kv_heads == q_heads else GQA, fp32 KV).
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dualpath/common/status.h"
#include "dualpath/kv/model.h"

namespace dualpath::control {

struct ModelSpecInfo {
  uint32_t layers = 8;
  uint32_t q_heads = 4;
  uint32_t kv_heads = 4;
  uint32_t head_dim = 32;
  uint32_t ffn_dim = 256;
  uint32_t vocab = 4096;
  uint64_t seed = 1;
  double rope_theta = 10000.0;

  kv::ModelGeometry Geometry() const;
  // "layers=8,q_heads=4,kv_heads=4,head_dim=32,ffn_dim=256,vocab=4096,seed=1" (every key but
  // rope_theta, which is printed only when not the default).
  std::string ToString() const;
};

// Parses "layers=8,q_heads=4,kv_heads=4,head_dim=32,ffn_dim=256,vocab=4096,seed=1" (any subset,
// also rope_theta). kInvalidArgument naming the bad key or value.
Result<ModelSpecInfo> ParseModelSpec(std::string_view spec);

}  // namespace dualpath::control
