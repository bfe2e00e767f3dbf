#include "dualpath/kv/model.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "dualpath/common/numeric.h"

namespace dualpath::kv {

std::string_view AttentionKindName(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kMha:
      return "mha";
    case AttentionKind::kGqa:
      return "gqa";
    case AttentionKind::kMla:
      return "mla";
  }
  return "unknown";
}

Result<AttentionKind> ParseAttentionKind(std::string_view name) {
  if (name == "mha") return AttentionKind::kMha;
  if (name == "gqa") return AttentionKind::kGqa;
  if (name == "mla") return AttentionKind::kMla;
  return InvalidArgument("unknown attention kind '" + std::string(name) +
                         "' (known: mha, gqa, mla)");
}

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp32:
      return "fp32";
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kFp16:
      return "fp16";
    case KvDtype::kFp8:
      return "fp8";
  }
  return "unknown";
}

Result<KvDtype> ParseKvDtype(std::string_view name) {
  if (name == "fp32") return KvDtype::kFp32;
  if (name == "bf16") return KvDtype::kBf16;
  if (name == "fp16") return KvDtype::kFp16;
  if (name == "fp8") return KvDtype::kFp8;
  return InvalidArgument("unknown kv dtype '" + std::string(name) +
                         "' (known: fp32, bf16, fp16, fp8)");
}

uint32_t KvDtypeBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp32:
      return 4;
    case KvDtype::kBf16:
    case KvDtype::kFp16:
      return 2;
    case KvDtype::kFp8:
      return 1;
  }
  return 0;
}

uint64_t DeriveKvBytesPerTokenPerLayer(const ModelGeometry& m) {
  const uint64_t b = KvDtypeBytes(m.kv_dtype);
  switch (m.attention) {
    case AttentionKind::kMha:
    case AttentionKind::kGqa:
      return 2ULL * m.num_kv_heads * m.head_dim * b;
    case AttentionKind::kMla:
      if (m.kv_dtype == KvDtype::kFp8) {
        // DeepSeek's FP8 MLA cache (FlashMLA): the latent in FP8 with one FP32 scale per 128
        // values, the rope key kept in BF16: 512 + 4 * 4 + 64 * 2 = 656 bytes for V3.2.
        return uint64_t{m.kv_lora_rank} + 4ULL * ((m.kv_lora_rank + 127) / 128) +
               2ULL * m.qk_rope_head_dim;
      }
      return (uint64_t{m.kv_lora_rank} + m.qk_rope_head_dim) * b;
  }
  return 0;
}

double ModelGeometry::LinearFlopsPerToken() const { return 2.0 * params_active_non_embedding; }

AttentionCost ModelGeometry::AttentionCostOf() const {
  AttentionCost c;
  switch (attention) {
    case AttentionKind::kMha:
    case AttentionKind::kGqa:
      c.per_pair = 2.0 * num_heads * (head_dim + v_head_dim);
      break;
    case AttentionKind::kMla:
      if (index_topk > 0) {
        // DSA runs MLA in MQA mode (absorbed): scores over the latent + rope (576 dims), values
        // over the latent (512 dims), per head.
        c.per_pair = 2.0 * num_heads * (2.0 * kv_lora_rank + qk_rope_head_dim);
        c.cap = index_topk;
      } else {
        // Dense MLA prefill runs in MHA mode: per-head qk (nope + rope) and v dims.
        c.per_pair = 2.0 * num_heads * (head_dim + v_head_dim);
      }
      break;
  }
  // The lightning indexer scores every causal (query, key) pair: index heads x index dim MACs.
  c.indexer = index_topk > 0;
  if (c.indexer) c.index_per_pair = 2.0 * index_num_heads * index_head_dim;
  c.layers = num_layers;
  return c;
}

double ModelGeometry::PrefillFlops(uint64_t cached_tokens, uint64_t new_tokens) const {
  return LinearFlopsPerToken() * static_cast<double>(new_tokens) +
         AttentionFlops(cached_tokens, new_tokens);
}

double ModelGeometry::DecodeKvBytesRead(uint64_t context_tokens) const {
  const double ctx = static_cast<double>(context_tokens);
  if (attention == AttentionKind::kMla && index_topk > 0) {
    const double index_key_bytes = static_cast<double>(index_head_dim) * KvDtypeBytes(kv_dtype);
    const double attended = std::min<double>(ctx, index_topk);
    return num_layers *
           (ctx * index_key_bytes + attended * static_cast<double>(kv_bytes_per_token_per_layer));
  }
  return ctx * static_cast<double>(KvBytesPerToken());
}

Status ModelGeometry::Validate() const {
  auto bad = [this](const std::string& what) {
    return InvalidArgument("model '" + name + "': " + what);
  };
  if (name.empty()) return InvalidArgument("model: empty name");
  auto range = [&](const char* field, uint64_t v, uint64_t lo, uint64_t hi) {
    const Status s = CheckCountRange(field, v, lo, hi, "");
    return s.ok() ? s : bad(s.message());
  };
  RETURN_IF_ERROR(range("num_layers", num_layers, 1, kMaxModelLayers));
  RETURN_IF_ERROR(range("hidden_size", hidden_size, 0, kMaxModelHidden));
  RETURN_IF_ERROR(range("num_heads", num_heads, 1, kMaxModelDim));
  RETURN_IF_ERROR(range("num_kv_heads", num_kv_heads, 1, kMaxModelDim));
  RETURN_IF_ERROR(range("head_dim", head_dim, 1, kMaxModelDim));
  RETURN_IF_ERROR(range("v_head_dim", v_head_dim, 1, kMaxModelDim));
  RETURN_IF_ERROR(range("kv_lora_rank", kv_lora_rank, 0, kMaxModelDim));
  RETURN_IF_ERROR(range("qk_rope_head_dim", qk_rope_head_dim, 0, kMaxModelDim));
  RETURN_IF_ERROR(range("index_num_heads", index_num_heads, 0, kMaxModelDim));
  RETURN_IF_ERROR(range("index_head_dim", index_head_dim, 0, kMaxModelDim));
  RETURN_IF_ERROR(range("index_topk", index_topk, 0, kMaxIndexTopk));
  RETURN_IF_ERROR(range("kv_bytes_per_token_per_layer", kv_bytes_per_token_per_layer, 1,
                        kMaxKvBytesPerTokenPerLayer));
  for (const auto& [field, v] :
       {std::pair{"params_total", params_total}, std::pair{"params_active", params_active},
        std::pair{"params_active_non_embedding", params_active_non_embedding},
        std::pair{"params_routed_experts", params_routed_experts}}) {
    const Status s = CheckRange(field, v, 0, kMaxModelParams, "parameters");
    if (!s.ok()) return bad(s.message());
  }
  // The ranges keep this far inside 64 bits; the check keeps it so if they ever widen.
  if (!CheckedMul(kv_bytes_per_token_per_layer, num_layers).has_value()) {
    return bad("KV bytes per token (kv_bytes_per_token_per_layer x num_layers) overflow 64 bits");
  }
  if (attention == AttentionKind::kMha && num_kv_heads != num_heads) {
    return bad("mha needs num_kv_heads == num_heads");
  }
  if (attention == AttentionKind::kGqa && num_heads % num_kv_heads != 0) {
    return bad("gqa needs num_heads to be a multiple of num_kv_heads");
  }
  if (attention == AttentionKind::kMla && (kv_lora_rank == 0 || qk_rope_head_dim == 0)) {
    return bad("mla needs kv_lora_rank and qk_rope_head_dim > 0");
  }
  const bool any_index = index_num_heads || index_head_dim || index_topk;
  const bool all_index = index_num_heads && index_head_dim && index_topk;
  if (any_index && !all_index) {
    return bad("index_num_heads, index_head_dim and index_topk must be all set or all 0");
  }
  if (any_index && attention != AttentionKind::kMla) {
    return bad("sparse attention (index_*) is only modelled for mla");
  }
  if (!(params_active_non_embedding > 0)) return bad("params_active_non_embedding must be > 0");
  if (params_active < params_active_non_embedding) {
    return bad("params_active must be >= params_active_non_embedding");
  }
  if (params_total < params_active) return bad("params_total must be >= params_active");
  if (params_routed_experts > params_total) {
    return bad("params_routed_experts must be <= params_total");
  }
  return Status::Ok();
}

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

Result<ModelGeometry> FindModel(std::string_view name_or_alias) {
  const std::string want = Lower(name_or_alias);
  std::string known;
  for (const ModelGeometry& m : ModelPresets()) {
    if (Lower(m.name) == want) return m;
    for (const std::string& a : m.aliases) {
      if (Lower(a) == want) return m;
    }
    known += (known.empty() ? "" : ", ") + m.name;
  }
  return Status(Code::kKvUnknownModel, "unknown model '" + std::string(name_or_alias) +
                                           "' (known: " + known + "; or a path to a .json file)");
}

Result<ModelGeometry> ResolveModel(std::string_view spec) {
  if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".json") {
    return LoadModelJson(std::string(spec));
  }
  return FindModel(spec);
}

}  // namespace dualpath::kv
