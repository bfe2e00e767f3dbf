// The built-in model presets. Every number comes from the model's public config.json on
// HuggingFace (or, for ds27b, the DualPath paper's Appendix A.2); docs/models.md cites each one.
// Parameter counts are derived from those configs by scripts/kv/derive_params.py.
#include "dualpath/kv/model.h"

namespace dualpath::kv {
namespace {

ModelGeometry Finish(ModelGeometry m) {
  m.kv_bytes_per_token_per_layer = DeriveKvBytesPerTokenPerLayer(m);
  return m;
}

ModelGeometry DeepSeekMla(std::string name, std::string display, std::vector<std::string> aliases,
                          uint32_t layers, uint32_t hidden, uint32_t heads, uint32_t index_heads,
                          uint32_t index_dim, uint32_t topk) {
  ModelGeometry m;
  m.name = std::move(name);
  m.display_name = std::move(display);
  m.aliases = std::move(aliases);
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.attention = AttentionKind::kMla;
  m.num_heads = heads;
  m.num_kv_heads = 1;
  m.head_dim = 128 + 64;  // qk_nope_head_dim + qk_rope_head_dim
  m.v_head_dim = 128;
  m.kv_lora_rank = 512;
  m.qk_rope_head_dim = 64;
  m.index_num_heads = index_heads;
  m.index_head_dim = index_dim;
  m.index_topk = topk;
  m.kv_dtype = KvDtype::kFp8;
  return m;
}

ModelGeometry Gqa(std::string name, std::string display, std::vector<std::string> aliases,
                  uint32_t layers, uint32_t hidden, uint32_t heads, uint32_t kv_heads,
                  uint32_t head_dim) {
  ModelGeometry m;
  m.name = std::move(name);
  m.display_name = std::move(display);
  m.aliases = std::move(aliases);
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.attention = AttentionKind::kGqa;
  m.num_heads = heads;
  m.num_kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.v_head_dim = head_dim;
  m.kv_dtype = KvDtype::kBf16;
  return m;
}

std::vector<ModelGeometry> BuildPresets() {
  std::vector<ModelGeometry> v;

  // DeepSeek-V3.2(-Exp): 61 layers, hidden 7168, 128 heads, MLA (kv_lora_rank 512, rope 64,
  // nope 128, v 128), DSA indexer 64 heads x 128 dim, top-2048.
  ModelGeometry ds = DeepSeekMla("ds660b", "DeepSeek-V3.2 (660B)",
                                 {"deepseek-v3.2", "deepseek-v3.2-exp", "ds-v3.2", "ds-660b"}, 61,
                                 7168, 128, 64, 128, 2048);
  ds.params_total = 671877944064;
  ds.params_active = 38403822336;
  ds.params_active_non_embedding = 36550464256;
  ds.params_routed_experts = 653908770816;  // 58 MoE layers x 256 experts x 3 x 7168 x 2048
  v.push_back(Finish(ds));

  // DualPath's downscaled DS 27B (Appendix A.2): 30 layers, hidden 2560, 32 heads, indexer 32
  // heads x 64 dim, top-1024. MLA dims not given in the paper: assumed equal to V3.2's.
  ModelGeometry ds27 = DeepSeekMla("ds27b", "DualPath DS 27B (downscaled DeepSeek-V3.2)",
                                   {"ds-27b", "deepseek-27b"}, 30, 2560, 32, 32, 64, 1024);
  ds27.params_total = 27198211368;
  ds27.params_active = 4619748648;
  ds27.params_active_non_embedding = 3957835048;
  ds27.params_routed_experts = 24631050240;  // 29 MoE layers x 72 experts x 3 x 2560 x 1536
  v.push_back(Finish(ds27));

  ModelGeometry q25 = Gqa("qwen2.5-32b", "Qwen2.5-32B",
                          {"qwen32b", "qwen-32b", "qwen2.5-32b-instruct"}, 64, 5120, 40, 8, 128);
  q25.params_total = q25.params_active = 32763876352;
  q25.params_active_non_embedding = 31206740992;
  v.push_back(Finish(q25));

  ModelGeometry llama =
      Gqa("r1-llama-8b", "DeepSeek-R1-Distill-Llama-8B",
          {"deepseek-r1-distill-llama-8b", "llama-8b", "llama3.1-8b"}, 32, 4096, 32, 8, 128);
  llama.params_total = llama.params_active = 8030261248;
  llama.params_active_non_embedding = 6979588096;
  v.push_back(Finish(llama));

  ModelGeometry q3 = Gqa("qwen3-32b", "Qwen3-32B", {"qwen3_32b"}, 64, 5120, 64, 8, 128);
  q3.params_total = q3.params_active = 32762123264;
  q3.params_active_non_embedding = 31206298624;
  v.push_back(Finish(q3));
  return v;
}

}  // namespace

const std::vector<ModelGeometry>& ModelPresets() {
  static const std::vector<ModelGeometry> presets = BuildPresets();
  return presets;
}

}  // namespace dualpath::kv
