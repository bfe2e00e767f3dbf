#include "control/model_spec.h"

#include <charconv>
#include <string>

namespace dualpath::control {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

template <typename T>
Status ParseNumber(std::string_view key, std::string_view text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  if (ec != std::errc() || ptr != end || text.empty()) {
    return InvalidArgument("model spec: bad value '" + std::string(text) + "' for " +
                           std::string(key));
  }
  return Status::Ok();
}

}  // namespace

kv::ModelGeometry ModelSpecInfo::Geometry() const {
  kv::ModelGeometry g;
  g.name = "ref";
  g.display_name = "dualpath reference CPU model";
  g.num_layers = layers;
  g.hidden_size = q_heads * head_dim;
  g.attention = kv_heads == q_heads ? kv::AttentionKind::kMha : kv::AttentionKind::kGqa;
  g.num_heads = q_heads;
  g.num_kv_heads = kv_heads;
  g.head_dim = head_dim;
  g.v_head_dim = head_dim;
  g.kv_dtype = kv::KvDtype::kFp32;
  g.kv_bytes_per_token_per_layer = 2ull * kv_heads * head_dim * sizeof(float);
  const double hidden = g.hidden_size;
  const double per_layer =
      hidden * hidden * 2 + 2.0 * hidden * kv_heads * head_dim + 3.0 * hidden * ffn_dim;
  g.params_active_non_embedding = per_layer * layers;
  g.params_active = g.params_active_non_embedding + 2.0 * hidden * vocab;
  g.params_total = g.params_active;
  return g;
}

std::string ModelSpecInfo::ToString() const {
  std::string s = "layers=" + std::to_string(layers) + ",q_heads=" + std::to_string(q_heads) +
                  ",kv_heads=" + std::to_string(kv_heads) +
                  ",head_dim=" + std::to_string(head_dim) + ",ffn_dim=" + std::to_string(ffn_dim) +
                  ",vocab=" + std::to_string(vocab) + ",seed=" + std::to_string(seed);
  if (rope_theta != 10000.0) s += ",rope_theta=" + std::to_string(rope_theta);
  return s;
}

Result<ModelSpecInfo> ParseModelSpec(std::string_view spec) {
  ModelSpecInfo m;
  std::string_view rest = spec;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = Trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument("model spec: '" + std::string(item) + "' is not key=value");
    }
    const std::string_view key = Trim(item.substr(0, eq));
    const std::string_view value = Trim(item.substr(eq + 1));
    if (key == "layers") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.layers));
    } else if (key == "q_heads") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.q_heads));
    } else if (key == "kv_heads") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.kv_heads));
    } else if (key == "head_dim") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.head_dim));
    } else if (key == "ffn_dim") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.ffn_dim));
    } else if (key == "vocab") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.vocab));
    } else if (key == "seed") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.seed));
    } else if (key == "rope_theta") {
      RETURN_IF_ERROR(ParseNumber(key, value, &m.rope_theta));
    } else {
      return InvalidArgument("model spec: unknown key '" + std::string(key) +
                             "' (known: layers, q_heads, kv_heads, head_dim, ffn_dim, vocab, "
                             "seed, rope_theta)");
    }
  }
  if (m.layers == 0 || m.q_heads == 0 || m.kv_heads == 0 || m.head_dim == 0 || m.ffn_dim == 0 ||
      m.vocab == 0) {
    return InvalidArgument(
        "model spec: layers, q_heads, kv_heads, head_dim, ffn_dim and vocab "
        "must be > 0 in '" +
        std::string(spec) + "'");
  }
  if (m.q_heads % m.kv_heads != 0) {
    return InvalidArgument("model spec: kv_heads " + std::to_string(m.kv_heads) +
                           " does not divide q_heads " + std::to_string(m.q_heads));
  }
  return m;
}

}  // namespace dualpath::control
