// RefModelConfig: validation, the kv geometry it implies, and the "key=value,..." spec format.
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

#include "dualpath/model/ref_model.h"

namespace dualpath::model {
namespace {

// Weights above this are a configuration mistake on this project's 24 GiB machines (and would
// take seconds to generate in every process).
constexpr double kMaxWeightBytes = 1024.0 * 1024 * 1024;

// Parameter count in double so absurd sizes cannot overflow before Validate rejects them.
double ParamsDouble(const RefModelConfig& c) {
  const double h = static_cast<double>(c.q_heads) * c.head_dim;
  const double kvd = static_cast<double>(c.kv_heads) * c.head_dim;
  const double per_layer = 2 * h                        // attention and MLP RMSNorm gains
                           + h * (h + 2 * kvd)          // Q, K, V projections
                           + h * h                      // output projection
                           + 3.0 * h * c.ffn_dim;       // gate, up, down
  return 2.0 * c.vocab * h + c.layers * per_layer + h;  // embedding, LM head, layers, final norm
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

template <typename T>
Status ParseInt(std::string_view key, std::string_view value, T* out) {
  T v{};
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty()) {
    return InvalidArgument("model spec: " + std::string(key) + "='" + std::string(value) +
                           "' is not an unsigned integer in range");
  }
  *out = v;
  return Status::Ok();
}

Status ParseFloat(std::string_view key, std::string_view value, float* out) {
  float v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty()) {
    return InvalidArgument("model spec: " + std::string(key) + "='" + std::string(value) +
                           "' is not a number");
  }
  *out = v;
  return Status::Ok();
}

}  // namespace

uint64_t RefModelConfig::ParameterCount() const {
  return static_cast<uint64_t>(ParamsDouble(*this));
}

Status RefModelConfig::Validate() const {
  auto positive = [](std::string_view name, uint64_t v) {
    return v == 0 ? InvalidArgument("model spec: " + std::string(name) + " must be > 0")
                  : Status::Ok();
  };
  RETURN_IF_ERROR(positive("layers", layers));
  RETURN_IF_ERROR(positive("q_heads", q_heads));
  RETURN_IF_ERROR(positive("kv_heads", kv_heads));
  RETURN_IF_ERROR(positive("head_dim", head_dim));
  RETURN_IF_ERROR(positive("ffn_dim", ffn_dim));
  RETURN_IF_ERROR(positive("vocab", vocab));
  // The kv geometry's ranges (docs/models.md "Input ranges"), so Geometry() always validates.
  auto at_most = [](std::string_view name, uint64_t v, uint64_t max) {
    return v > max ? InvalidArgument("model spec: " + std::string(name) + "=" + std::to_string(v) +
                                     " is outside [1, " + std::to_string(max) + "]")
                   : Status::Ok();
  };
  RETURN_IF_ERROR(at_most("layers", layers, kv::kMaxModelLayers));
  RETURN_IF_ERROR(at_most("q_heads", q_heads, kv::kMaxModelDim));
  RETURN_IF_ERROR(at_most("kv_heads", kv_heads, kv::kMaxModelDim));
  RETURN_IF_ERROR(at_most("head_dim", head_dim, kv::kMaxModelDim));
  if (q_heads % kv_heads != 0) {
    return InvalidArgument("model spec: kv_heads=" + std::to_string(kv_heads) +
                           " must divide q_heads=" + std::to_string(q_heads));
  }
  if (head_dim % 2 != 0) {
    return InvalidArgument("model spec: head_dim=" + std::to_string(head_dim) +
                           " must be even (rotary positions rotate pairs)");
  }
  if (!std::isfinite(rope_theta) || !(rope_theta > 0)) {
    return InvalidArgument("model spec: rope_theta must be a finite number > 0");
  }
  const double bytes = ParamsDouble(*this) * sizeof(float);
  if (bytes > kMaxWeightBytes) {
    return InvalidArgument("model spec: weights would take " + std::to_string(bytes / (1 << 20)) +
                           " MiB (limit 1 GiB); reduce layers, dims, ffn_dim or vocab");
  }
  return Status::Ok();
}

kv::ModelGeometry RefModelConfig::Geometry() const {
  kv::ModelGeometry g;
  g.name = "ref";
  g.display_name = "RefModel(" + ToString() + ")";
  g.num_layers = layers;
  g.hidden_size = hidden();
  g.attention = kv_heads == q_heads ? kv::AttentionKind::kMha : kv::AttentionKind::kGqa;
  g.num_heads = q_heads;
  g.num_kv_heads = kv_heads;
  g.head_dim = head_dim;
  g.v_head_dim = head_dim;
  g.kv_dtype = kv::KvDtype::kFp32;
  g.kv_bytes_per_token_per_layer = KvBytesPerTokenPerLayer();
  const double total = ParamsDouble(*this);
  g.params_total = total;
  g.params_active = total;  // dense: every weight is used for every token
  g.params_active_non_embedding = total - 2.0 * vocab * hidden();
  return g;
}

Result<RefModelConfig> RefModelConfig::Parse(std::string_view spec) {
  RefModelConfig c;
  spec = Trim(spec);
  uint32_t seen = 0;  // bit per key: a repeated key is a mistake, not "last one wins"
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = Trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (comma != std::string_view::npos && Trim(spec).empty()) {
      return InvalidArgument("model spec: trailing ','");
    }
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument("model spec: item '" + std::string(item) + "' is not key=value");
    }
    const std::string_view key = Trim(item.substr(0, eq));
    const std::string_view value = Trim(item.substr(eq + 1));
    static constexpr std::string_view kKeys[] = {"layers",  "q_heads", "kv_heads", "head_dim",
                                                 "ffn_dim", "vocab",   "seed",     "rope_theta"};
    uint32_t bit = 0;
    for (uint32_t i = 0; i < std::size(kKeys); ++i) {
      if (kKeys[i] == key) bit = 1u << i;
    }
    if (bit == 0) {
      return InvalidArgument("model spec: unknown key '" + std::string(key) +
                             "' (known: layers, q_heads, kv_heads, head_dim, ffn_dim, vocab, "
                             "seed, rope_theta)");
    }
    if (seen & bit) return InvalidArgument("model spec: key '" + std::string(key) + "' repeated");
    seen |= bit;
    if (key == "layers") RETURN_IF_ERROR(ParseInt(key, value, &c.layers));
    if (key == "q_heads") RETURN_IF_ERROR(ParseInt(key, value, &c.q_heads));
    if (key == "kv_heads") RETURN_IF_ERROR(ParseInt(key, value, &c.kv_heads));
    if (key == "head_dim") RETURN_IF_ERROR(ParseInt(key, value, &c.head_dim));
    if (key == "ffn_dim") RETURN_IF_ERROR(ParseInt(key, value, &c.ffn_dim));
    if (key == "vocab") RETURN_IF_ERROR(ParseInt(key, value, &c.vocab));
    if (key == "seed") RETURN_IF_ERROR(ParseInt(key, value, &c.seed));
    if (key == "rope_theta") RETURN_IF_ERROR(ParseFloat(key, value, &c.rope_theta));
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

std::string RefModelConfig::ToString() const {
  // Shortest round-trip form of the float, so Parse(ToString()) restores the same bits.
  char theta[32];
  const auto [end, ec] = std::to_chars(theta, theta + sizeof(theta), rope_theta);
  const std::string theta_str = ec == std::errc() ? std::string(theta, end) : "nan";
  return "layers=" + std::to_string(layers) + ",q_heads=" + std::to_string(q_heads) +
         ",kv_heads=" + std::to_string(kv_heads) + ",head_dim=" + std::to_string(head_dim) +
         ",ffn_dim=" + std::to_string(ffn_dim) + ",vocab=" + std::to_string(vocab) +
         ",seed=" + std::to_string(seed) + ",rope_theta=" + theta_str;
}

}  // namespace dualpath::model
