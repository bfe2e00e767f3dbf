// Loading a ModelGeometry from JSON (format: docs/models.md). Strict: unknown keys and wrong
// types are errors naming the key, so a typo cannot silently fall back to a default.
#include <nlohmann/json.hpp>
#include <set>

#include "dualpath/common/file.h"
#include "dualpath/common/numeric.h"
#include "dualpath/kv/model.h"

namespace dualpath::kv {
namespace {

using nlohmann::json;

const std::set<std::string>& KnownKeys() {
  static const std::set<std::string> keys = {"name",
                                             "display_name",
                                             "aliases",
                                             "num_layers",
                                             "hidden_size",
                                             "attention",
                                             "num_heads",
                                             "num_kv_heads",
                                             "head_dim",
                                             "v_head_dim",
                                             "kv_lora_rank",
                                             "qk_rope_head_dim",
                                             "index_num_heads",
                                             "index_head_dim",
                                             "index_topk",
                                             "kv_dtype",
                                             "kv_bytes_per_token_per_layer",
                                             "params_total",
                                             "params_active",
                                             "params_active_non_embedding",
                                             "params_routed_experts"};
  return keys;
}

class Reader {
 public:
  Reader(const json& j, std::string_view origin) : j_(j), origin_(origin) {}

  // An integer in [lo, hi]; checked before it is narrowed, so 2^40 cannot wrap into a uint32_t.
  Status Uint(const char* key, bool required, uint64_t lo, uint64_t hi, uint64_t* out) {
    auto it = j_.find(key);
    if (it == j_.end()) {
      return required ? Error(key, "missing") : Status::Ok();
    }
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
      return Error(key, "must be a non-negative integer");
    }
    const uint64_t v = it->get<uint64_t>();
    const Status range = CheckCountRange("", v, lo, hi, "");
    if (!range.ok()) return Error(key, range.message());  // "' = v is outside [lo, hi]"
    *out = v;
    return Status::Ok();
  }
  Status U32(const char* key, bool required, uint32_t lo, uint32_t hi, uint32_t* out) {
    uint64_t v = *out;
    RETURN_IF_ERROR(Uint(key, required, lo, hi, &v));
    *out = static_cast<uint32_t>(v);
    return Status::Ok();
  }
  Status Number(const char* key, bool required, double lo, double hi, double* out) {
    auto it = j_.find(key);
    if (it == j_.end()) return required ? Error(key, "missing") : Status::Ok();
    if (!it->is_number()) return Error(key, "must be a number");
    const Status range = CheckRange("", it->get<double>(), lo, hi, "");
    if (!range.ok()) return Error(key, range.message());
    *out = it->get<double>();
    return Status::Ok();
  }
  Status String(const char* key, bool required, std::string* out) {
    auto it = j_.find(key);
    if (it == j_.end()) return required ? Error(key, "missing") : Status::Ok();
    if (!it->is_string()) return Error(key, "must be a string");
    *out = it->get<std::string>();
    return Status::Ok();
  }
  // "<origin>: key 'num_layers' missing", "<origin>: key 'num_layers' = 0 is outside [1, 4096]".
  Status Error(const char* key, const std::string& what) const {
    const bool range = what.starts_with(" = ");
    return InvalidArgument(std::string(origin_) + ": key '" + key + "'" + (range ? "" : " ") +
                           what);
  }

 private:
  const json& j_;
  std::string_view origin_;
};

}  // namespace

Result<ModelGeometry> ParseModelJson(std::string_view json_text, std::string_view origin) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ParseError(std::string(origin) + ": not valid JSON");
  if (!j.is_object()) return ParseError(std::string(origin) + ": top level must be an object");
  for (const auto& [key, value] : j.items()) {
    if (!KnownKeys().contains(key)) {
      return InvalidArgument(std::string(origin) + ": unknown key '" + key + "'");
    }
  }
  Reader r(j, origin);
  ModelGeometry m;
  RETURN_IF_ERROR(r.String("name", true, &m.name));
  m.display_name = m.name;
  RETURN_IF_ERROR(r.String("display_name", false, &m.display_name));
  if (auto it = j.find("aliases"); it != j.end()) {
    if (!it->is_array()) return r.Error("aliases", "must be an array of strings");
    for (const json& a : *it) {
      if (!a.is_string()) return r.Error("aliases", "must be an array of strings");
      m.aliases.push_back(a.get<std::string>());
    }
  }
  std::string attention = "gqa";
  RETURN_IF_ERROR(r.String("attention", true, &attention));
  Result<AttentionKind> kind = ParseAttentionKind(attention);
  if (!kind.ok()) return kind.status().WithContext(origin);
  m.attention = *kind;
  std::string dtype = "bf16";
  RETURN_IF_ERROR(r.String("kv_dtype", false, &dtype));
  Result<KvDtype> kv_dtype = ParseKvDtype(dtype);
  if (!kv_dtype.ok()) return kv_dtype.status().WithContext(origin);
  m.kv_dtype = *kv_dtype;
  RETURN_IF_ERROR(r.U32("num_layers", true, 1, kMaxModelLayers, &m.num_layers));
  RETURN_IF_ERROR(r.U32("hidden_size", false, 0, kMaxModelHidden, &m.hidden_size));
  RETURN_IF_ERROR(r.U32("num_heads", true, 1, kMaxModelDim, &m.num_heads));
  const bool mla = m.attention == AttentionKind::kMla;
  m.num_kv_heads = mla ? 1 : (m.attention == AttentionKind::kMha ? m.num_heads : 0);
  RETURN_IF_ERROR(
      r.U32("num_kv_heads", m.attention == AttentionKind::kGqa, 1, kMaxModelDim, &m.num_kv_heads));
  RETURN_IF_ERROR(r.U32("head_dim", true, 1, kMaxModelDim, &m.head_dim));
  m.v_head_dim = m.head_dim;
  RETURN_IF_ERROR(r.U32("v_head_dim", false, 1, kMaxModelDim, &m.v_head_dim));
  RETURN_IF_ERROR(r.U32("kv_lora_rank", mla, mla ? 1 : 0, kMaxModelDim, &m.kv_lora_rank));
  RETURN_IF_ERROR(r.U32("qk_rope_head_dim", mla, mla ? 1 : 0, kMaxModelDim, &m.qk_rope_head_dim));
  RETURN_IF_ERROR(r.U32("index_num_heads", false, 0, kMaxModelDim, &m.index_num_heads));
  RETURN_IF_ERROR(r.U32("index_head_dim", false, 0, kMaxModelDim, &m.index_head_dim));
  RETURN_IF_ERROR(r.U32("index_topk", false, 0, kMaxIndexTopk, &m.index_topk));
  RETURN_IF_ERROR(r.Number("params_active_non_embedding", true, 0, kMaxModelParams,
                           &m.params_active_non_embedding));
  m.params_active = m.params_active_non_embedding;
  RETURN_IF_ERROR(r.Number("params_active", false, 0, kMaxModelParams, &m.params_active));
  m.params_total = m.params_active;
  RETURN_IF_ERROR(r.Number("params_total", false, 0, kMaxModelParams, &m.params_total));
  RETURN_IF_ERROR(
      r.Number("params_routed_experts", false, 0, kMaxModelParams, &m.params_routed_experts));
  m.kv_bytes_per_token_per_layer = DeriveKvBytesPerTokenPerLayer(m);
  RETURN_IF_ERROR(r.Uint("kv_bytes_per_token_per_layer", false, 1, kMaxKvBytesPerTokenPerLayer,
                         &m.kv_bytes_per_token_per_layer));
  RETURN_IF_ERROR(m.Validate().WithContext(origin));
  return m;
}

Result<ModelGeometry> LoadModelJson(const std::string& path) {
  // A model description is a few hundred bytes; 16 MiB bounds a wrong path without a false alarm.
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "model file", 16 << 20));
  return ParseModelJson(text, path);
}

}  // namespace dualpath::kv
