// ModelGeometry: what dualpath needs to know about an LLM to size, move and price its KV-cache.
//
// A ModelGeometry describes the attention layout (MHA / GQA / MLA, optionally with DeepSeek Sparse
// Attention's lightning indexer), the KV dtype, and the parameter counts. From these it derives
// the KV bytes per token (what storage, pool and transfer move) and the FLOP counts the simulator
// charges for prefill and decode. Presets cover the models the seed papers evaluate; any other
// model can be described in a JSON file (docs/models.md documents the format and cites the source
// of every preset number).
//
// Thread safety: ModelGeometry is a value. ModelPresets() returns an immutable table built on
// first use (thread-safe static init); all functions here may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"

namespace dualpath::kv {

enum class AttentionKind {
  kMha,  // multi-head attention: one K and one V head per query head
  kGqa,  // grouped-query attention: num_kv_heads K/V heads shared by groups of query heads
  kMla,  // multi-head latent attention (DeepSeek): one compressed latent + rope key per token
};

enum class KvDtype { kFp32, kBf16, kFp16, kFp8 };

std::string_view AttentionKindName(AttentionKind kind);  // "mha", "gqa", "mla"
Result<AttentionKind> ParseAttentionKind(std::string_view name);
std::string_view KvDtypeName(KvDtype dtype);  // "fp32", "bf16", "fp16", "fp8"
Result<KvDtype> ParseKvDtype(std::string_view name);
uint32_t KvDtypeBytes(KvDtype dtype);  // 4, 2, 2, 1

// Input ranges of a model's geometry (docs/models.md "Input ranges"), checked where a model JSON
// is parsed and again by Validate(). Generous for any real model (the largest today have ~130
// layers, 128 heads, head dims of 256 and ~2e12 parameters) and small enough that the derived
// sizes cannot overflow: 2 x heads x head_dim x 4 bytes <= 2^35 per layer, x layers <= 2^47.
inline constexpr uint32_t kMaxModelLayers = 4096;
inline constexpr uint32_t kMaxModelDim = 65536;  // heads, head dims, latent/rope/index dims
inline constexpr uint32_t kMaxModelHidden = 1u << 20;
inline constexpr uint32_t kMaxIndexTopk = 1u << 30;  // tokens
// The largest derived value: 2 (K and V) x kMaxModelDim heads x kMaxModelDim dims x 4 bytes.
inline constexpr uint64_t kMaxKvBytesPerTokenPerLayer = uint64_t{1} << 35;
inline constexpr double kMaxModelParams = 1e15;

// ModelGeometry::AttentionFlops with the model's constants taken out of the call: what a caller
// that evaluates it millions of times keeps (the simulator: every prefill chunk and every decode
// join, issue 27). Flops() computes exactly the doubles AttentionFlops does (the same operations
// in the same order; AttentionFlops is Flops() of a fresh copy).
struct AttentionCost {
  double per_pair = 0;        // FLOPs per attended (query, key) pair per layer, main attention
  uint64_t cap = 0;           // keys a query attends to at most (DSA top-k), 0: all
  bool indexer = false;       // DSA's lightning indexer scores every causal pair
  double index_per_pair = 0;  // its FLOPs per pair per layer
  double layers = 0;

  // Sum over new query tokens i = 0..n-1 of min(cap, c + i + 1): the number of (query, key)
  // pairs a causal prefill of n tokens after c cached tokens attends to, each query limited to
  // `cap` keys (cap == 0: no limit).
  static double AttendedPairs(uint64_t c, uint64_t n, uint64_t cap) {
    auto full = [](double from, double count) {
      // sum_{i=0}^{count-1} (from + i + 1)
      return count * from + count * (count + 1) / 2.0;
    };
    if (n == 0) return 0;
    if (cap == 0 || c + n <= cap) return full(static_cast<double>(c), static_cast<double>(n));
    // Queries with c + i + 1 <= cap attend to c + i + 1 keys; the rest to cap keys.
    const uint64_t uncapped = c >= cap ? 0 : cap - c;  // i in [0, uncapped) are below the cap
    return full(static_cast<double>(c), static_cast<double>(uncapped)) +
           static_cast<double>(n - uncapped) * static_cast<double>(cap);
  }
  double Flops(uint64_t cached_tokens, uint64_t new_tokens) const {
    double per_layer = per_pair * AttendedPairs(cached_tokens, new_tokens, cap);
    if (indexer) per_layer += index_per_pair * AttendedPairs(cached_tokens, new_tokens, 0);
    return per_layer * layers;
  }
};

struct ModelGeometry {
  std::string name;          // short preset id, e.g. "ds660b"
  std::string display_name;  // e.g. "DeepSeek-V3.2 (660B)"
  std::vector<std::string> aliases;

  uint32_t num_layers = 0;
  uint32_t hidden_size = 0;
  AttentionKind attention = AttentionKind::kGqa;
  uint32_t num_heads = 0;     // query heads
  uint32_t num_kv_heads = 0;  // MHA: == num_heads; GQA: K/V heads; MLA: 1 (the shared latent)
  uint32_t head_dim = 0;      // MHA/GQA: per-head dim of Q/K; MLA: qk_nope_head_dim + rope dim
  uint32_t v_head_dim = 0;    // MHA/GQA: usually == head_dim; MLA: v_head_dim
  // MLA only (0 otherwise).
  uint32_t kv_lora_rank = 0;      // compressed latent dim (c_KV)
  uint32_t qk_rope_head_dim = 0;  // decoupled rope key dim (k_R)
  // DeepSeek Sparse Attention (0 = dense attention). The lightning indexer scores every cached
  // token for every query; the main attention then attends only to the top-k tokens.
  uint32_t index_num_heads = 0;
  uint32_t index_head_dim = 0;
  uint32_t index_topk = 0;

  KvDtype kv_dtype = KvDtype::kBf16;
  // Bytes of KV-cache one token occupies in one layer (K+V for MHA/GQA; latent+rope (+indexer
  // key) for MLA). Derived by DeriveKvBytesPerTokenPerLayer() for presets; a JSON model may
  // override it (e.g. to include per-tile FP8 scales).
  uint64_t kv_bytes_per_token_per_layer = 0;

  double params_total = 0;                 // all parameters, embeddings included
  double params_active = 0;                // activated per token, embeddings included
  double params_active_non_embedding = 0;  // activated per token, excl. input embedding/LM head
  // Parameters of the routed experts (MoE), the only ones expert parallelism divides among GPUs;
  // everything else (attention, indexer, shared experts, dense layers, router, norms,
  // embeddings) is replicated on every GPU. 0 for dense models.
  double params_routed_experts = 0;

  uint64_t KvBytesPerToken() const { return kv_bytes_per_token_per_layer * num_layers; }

  // Dense (GEMM) FLOPs to process one token through the whole model: 2 x active non-embedding
  // params (one multiply-add per weight). Attention score/value FLOPs are separate.
  double LinearFlopsPerToken() const;

  // Attention FLOPs (QK^T and AV, plus the DSA indexer's scoring), whole model, all layers, to
  // prefill `new_tokens` tokens that follow `cached_tokens` already-cached tokens with a causal
  // mask. Query i (0-based) attends to cached_tokens + i + 1 tokens, or to at most index_topk
  // of them when sparse attention is on (the indexer still scores all of them).
  double AttentionFlops(uint64_t cached_tokens, uint64_t new_tokens) const {
    return AttentionCostOf().Flops(cached_tokens, new_tokens);
  }
  // AttentionFlops' constants for this model.
  AttentionCost AttentionCostOf() const;

  // Total prefill FLOPs: LinearFlopsPerToken() * new_tokens + AttentionFlops(...).
  double PrefillFlops(uint64_t cached_tokens, uint64_t new_tokens) const;

  // FLOPs to decode one token for one sequence whose context holds `context_tokens` tokens.
  double DecodeFlopsPerToken(uint64_t context_tokens) const {
    return PrefillFlops(context_tokens, 1);
  }

  // KV-cache bytes read from device memory to decode one token of one sequence with
  // `context_tokens` of context (all of them for dense attention; for DSA, the indexer keys of
  // all tokens plus the top-k latents).
  double DecodeKvBytesRead(uint64_t context_tokens) const;

  // Weight bytes read per decode step (active params x weight_bytes), shared by the batch.
  double DecodeWeightBytes(double weight_bytes_per_param) const {
    return params_active * weight_bytes_per_param;
  }

  // Checks that the fields are in their ranges (above) and consistent (MLA fields present for
  // MLA, index_* all set or all zero, KV bytes non-zero, KV bytes per token within 64 bits).
  // kInvalidArgument naming the field otherwise.
  Status Validate() const;
};

// KV bytes per token per layer implied by the attention fields and dtype:
//   MHA/GQA: 2 * num_kv_heads * head_dim * dtype_bytes   (K and V)
//   MLA:     (kv_lora_rank + qk_rope_head_dim) * dtype_bytes
//            + index_head_dim * dtype_bytes              (DSA indexer key, when index_topk > 0)
uint64_t DeriveKvBytesPerTokenPerLayer(const ModelGeometry& model);

// The built-in presets: ds660b, ds27b, qwen2.5-32b, r1-llama-8b, qwen3-32b.
const std::vector<ModelGeometry>& ModelPresets();

// Finds a preset by name or alias (case-insensitive). Unknown names give kKvUnknownModel with a
// message listing the known names.
Result<ModelGeometry> FindModel(std::string_view name_or_alias);

// Loads a model from a JSON file (format in docs/models.md). Errors: kNotFound / kIoError for the
// file, kParseError for bad JSON, kInvalidArgument naming the bad field.
Result<ModelGeometry> LoadModelJson(const std::string& path);
// Same, from JSON text already in memory (`origin` names it in error messages).
Result<ModelGeometry> ParseModelJson(std::string_view json_text, std::string_view origin);

// FindModel(spec) unless `spec` ends in ".json", then LoadModelJson(spec). What CLIs accept.
Result<ModelGeometry> ResolveModel(std::string_view spec);

}  // namespace dualpath::kv
