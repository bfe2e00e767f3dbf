// RefModel: creation, embedding, one decoder layer, the LM head.
//
// Chunking invariance (ref_model.h) holds because every quantity of token t is computed from
// token t's own row (norms, projections, rotary, MLP) or from the KV rows [0, start + t] in
// increasing position order (attention), with the fixed-order reductions of kernels.h. Nothing
// sums across tokens of one call, and nothing depends on n, start or the token-group blocking.
#include "dualpath/model/ref_model.h"

#include <cmath>
#include <cstring>
#include <string>

#include "dualpath/common/check.h"
#include "model/attention.h"
#include "model/kernel_table.h"
#include "model/weights.h"

namespace dualpath::model {

RefModel::RefModel(const RefModelConfig& config, const internal::KernelTable* kernels)
    : config_(config),
      w_(std::make_unique<Weights>(Weights::Generate(config))),
      kernels_(kernels) {}

RefModel::~RefModel() = default;

Result<std::unique_ptr<RefModel>> RefModel::Create(const RefModelConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(const internal::KernelTable* kernels, internal::KernelsFromEnvironment());
  return std::unique_ptr<RefModel>(new RefModel(config, kernels));
}

const RefModelConfig& RefModel::config() const { return config_; }

std::string_view RefModel::isa() const { return kernels_->isa; }

void RefModel::Embed(std::span<const uint32_t> tokens, std::span<float> hidden) const {
  const size_t h = config_.hidden();
  DUALPATH_CHECK(hidden.size() == tokens.size() * h, "Embed: hidden must hold tokens x hidden()");
  for (size_t i = 0; i < tokens.size(); ++i) {
    DUALPATH_CHECK(tokens[i] < config_.vocab, "Embed: token id " + std::to_string(tokens[i]) +
                                                  " >= vocab " + std::to_string(config_.vocab));
    std::memcpy(hidden.data() + i * h, w_->embedding.data() + size_t{tokens[i]} * h,
                h * sizeof(float));
  }
}

namespace {

// Rotates the (x[2i], x[2i+1]) pairs of each of `heads` heads of `head_dim` by position * freq_i.
void ApplyRotary(float* x, size_t heads, size_t head_dim, const float* cos_v, const float* sin_v) {
  for (size_t hh = 0; hh < heads; ++hh) {
    float* v = x + hh * head_dim;
    for (size_t i = 0; i < head_dim / 2; ++i) {
      const float a = v[2 * i];
      const float b = v[2 * i + 1];
      v[2 * i] = a * cos_v[i] - b * sin_v[i];
      v[2 * i + 1] = a * sin_v[i] + b * cos_v[i];
    }
  }
}

// Tokens per internal pass of ForwardLayer (see there).
constexpr size_t kSubChunk = 256;

}  // namespace

void RefModel::ForwardLayer(uint32_t layer, uint64_t start, std::span<std::byte> layer_kv,
                            std::span<float> hidden) const {
  const RefModelConfig& c = config_;
  const size_t h = c.hidden();
  const size_t hd = c.head_dim;
  const size_t q_dim = h;
  const size_t kv_dim = size_t{c.kv_heads} * hd;
  const size_t ffn = c.ffn_dim;
  const size_t bpt = c.KvBytesPerTokenPerLayer();
  DUALPATH_CHECK(layer < c.layers, "ForwardLayer: layer " + std::to_string(layer) + " >= layers");
  DUALPATH_CHECK(hidden.size() % h == 0, "ForwardLayer: hidden is not a whole number of rows");
  const size_t n = hidden.size() / h;
  if (n == 0) return;
  const uint64_t end = start + n;
  DUALPATH_CHECK(layer_kv.size() >= end * bpt,
                 "ForwardLayer: layer_kv holds " + std::to_string(layer_kv.size()) +
                     " bytes, need (start + n) * bpt = " + std::to_string(end * bpt));
  if (n > kSubChunk) {
    // Long calls run as consecutive sub-chunks: scratch stays ~1.5 MiB instead of 6 KiB per token
    // (184 MiB for a 30K-token prefill), and chunking invariance makes the bits the same.
    for (size_t off = 0; off < n; off += kSubChunk) {
      const size_t m = n - off < kSubChunk ? n - off : kSubChunk;
      ForwardLayer(layer, start + off, layer_kv, hidden.subspan(off * h, m * h));
    }
    return;
  }
  const LayerWeights& lw = w_->layers[layer];
  const size_t qkv_rows = q_dim + 2 * kv_dim;

  // One scratch allocation per call: normed input, Q/K/V, attention output, MLP activations and
  // the rotary table of one token.
  std::vector<float> scratch(n * h + n * qkv_rows + n * q_dim + n * 2 * ffn + n * ffn + n * h + hd);
  float* xn = scratch.data();
  float* qkv = xn + n * h;
  float* attn = qkv + n * qkv_rows;
  float* gate_up = attn + n * q_dim;
  float* act = gate_up + n * 2 * ffn;
  float* proj = act + n * ffn;
  float* cos_v = proj + n * h;
  float* sin_v = cos_v + hd / 2;

  // Attention input: RMSNorm, then Q, K, V for every new token.
  const internal::KernelTable& k = *kernels_;
  k.rms_norm_rows(hidden.data(), lw.attn_norm.data(), h, n, xn);
  k.mat_vec_tokens(lw.wqkv.data(), qkv_rows, h, xn, qkv, n);

  // Rotary positions on Q and K (angles in double, rounded once), then K/V into the cache.
  std::byte* kv = layer_kv.data();
  for (size_t t = 0; t < n; ++t) {
    const uint64_t pos = start + t;
    for (size_t i = 0; i < hd / 2; ++i) {
      const double angle = static_cast<double>(pos) * w_->inv_freq[i];
      cos_v[i] = static_cast<float>(std::cos(angle));
      sin_v[i] = static_cast<float>(std::sin(angle));
    }
    float* row = qkv + t * qkv_rows;
    ApplyRotary(row, c.q_heads, hd, cos_v, sin_v);
    ApplyRotary(row + q_dim, c.kv_heads, hd, cos_v, sin_v);
    std::memcpy(kv + pos * bpt, row + q_dim, 2 * kv_dim * sizeof(float));  // K then V
  }

  // Causal attention of each new token over positions [0, start + t] (attention.h).
  internal::AttentionShape shape{c.q_heads, c.kv_heads, hd, bpt};
  std::vector<float> attn_scratch;
  k.causal_attention(shape, start, n, qkv, qkv_rows, kv, attn, &attn_scratch);

  // Output projection into the residual stream.
  k.mat_vec_tokens(lw.wo.data(), h, q_dim, attn, proj, n);
  for (size_t i = 0; i < n * h; ++i) hidden[i] += proj[i];

  // SwiGLU MLP into the residual stream.
  k.rms_norm_rows(hidden.data(), lw.mlp_norm.data(), h, n, xn);
  k.mat_vec_tokens(lw.w_gate_up.data(), 2 * ffn, h, xn, gate_up, n);
  k.swiglu_rows(gate_up, ffn, n, act);
  k.mat_vec_tokens(lw.w_down.data(), h, ffn, act, proj, n);
  for (size_t i = 0; i < n * h; ++i) hidden[i] += proj[i];
}

void RefModel::Logits(std::span<const float> hidden_row, std::span<float> logits) const {
  const size_t h = config_.hidden();
  DUALPATH_CHECK(hidden_row.size() == h, "Logits: hidden_row must hold hidden() floats");
  DUALPATH_CHECK(logits.size() == config_.vocab, "Logits: logits must hold vocab floats");
  std::vector<float> xn(h);
  kernels_->rms_norm_rows(hidden_row.data(), w_->final_norm.data(), h, 1, xn.data());
  kernels_->mat_vec(w_->lm_head.data(), config_.vocab, h, xn.data(), logits.data());
}

uint32_t RefModel::Argmax(std::span<const float> logits) {
  DUALPATH_CHECK(!logits.empty(), "Argmax: empty logits");
  uint32_t best = 0;
  for (uint32_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lowest index
  }
  return best;
}

uint64_t RefModel::LogitsDigest(std::span<const float> logits) {
  // FNV-1a 64 over the little-endian bytes of the float bits: any single-bit change shows.
  uint64_t hash = 0xcbf29ce484222325ull;
  for (float f : logits) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    for (int b = 0; b < 4; ++b) {
      hash ^= (bits >> (8 * b)) & 0xffu;
      hash *= 0x100000001b3ull;
    }
  }
  return hash;
}

}  // namespace dualpath::model
