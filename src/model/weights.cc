#include "model/weights.h"

#include <cmath>
#include <cstddef>

#include "dualpath/common/splitmix.h"

namespace dualpath::model {
namespace {

// Tensor ids: the stream of one tensor never depends on any other tensor.
enum TensorId : uint64_t {
  kEmbedding = 1,
  kFinalNorm = 2,
  kLmHead = 3,
  kLayerBase = 1000,  // + layer * kPerLayer + one of the below
  kPerLayer = 16,
  kAttnNorm = 0,
  kWqkv = 1,
  kWo = 2,
  kMlpNorm = 3,
  kGateUp = 4,
  kDown = 5,
};

// n values (2u - 1) * scale + offset from the stream of (seed, tensor).
std::vector<float> Uniform(uint64_t seed, uint64_t tensor, size_t n, float scale,
                           float offset = 0.0f) {
  std::vector<float> out(n);
  SplitMix64 stream(SplitMix64::Mix(seed ^ SplitMix64::Mix(tensor * SplitMix64::kGamma + 1)));
  for (size_t i = 0; i < n; ++i) {
    const uint64_t z = stream.Next();
    // 24 bits: exactly representable, so u and 2u - 1 are exact; only the scale rounds.
    const float u = static_cast<float>(z >> 40) * 0x1p-24f;
    out[i] = (2.0f * u - 1.0f) * scale + offset;
  }
  return out;
}

// Uniform(-a, a) with a = sqrt(3 / fan_in) has variance 1 / fan_in: a projection keeps the scale
// of its input, so activations neither vanish nor blow up through the layers. sqrt is correctly
// rounded in IEEE arithmetic, hence identical everywhere.
float FanInScale(size_t fan_in) {
  return static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
}

}  // namespace

RefModel::Weights RefModel::Weights::Generate(const RefModelConfig& c) {
  const size_t h = c.hidden();
  const size_t q_dim = h;
  const size_t kv_dim = static_cast<size_t>(c.kv_heads) * c.head_dim;
  const size_t ffn = c.ffn_dim;
  const uint64_t s = c.seed;

  Weights w;
  w.embedding = Uniform(s, kEmbedding, static_cast<size_t>(c.vocab) * h, 1.0f);
  w.final_norm = Uniform(s, kFinalNorm, h, 0.25f, 1.0f);  // gains in [0.75, 1.25)
  w.lm_head = Uniform(s, kLmHead, static_cast<size_t>(c.vocab) * h, FanInScale(h));
  w.layers.resize(c.layers);
  for (uint32_t l = 0; l < c.layers; ++l) {
    const uint64_t base = kLayerBase + uint64_t{l} * kPerLayer;
    LayerWeights& lw = w.layers[l];
    lw.attn_norm = Uniform(s, base + kAttnNorm, h, 0.25f, 1.0f);
    lw.wqkv = Uniform(s, base + kWqkv, (q_dim + 2 * kv_dim) * h, FanInScale(h));
    lw.wo = Uniform(s, base + kWo, h * q_dim, FanInScale(q_dim));
    lw.mlp_norm = Uniform(s, base + kMlpNorm, h, 0.25f, 1.0f);
    lw.w_gate_up = Uniform(s, base + kGateUp, 2 * ffn * h, FanInScale(h));
    lw.w_down = Uniform(s, base + kDown, h * ffn, FanInScale(ffn));
  }
  const size_t pairs = c.head_dim / 2;
  w.inv_freq.resize(pairs);
  for (size_t i = 0; i < pairs; ++i) {
    w.inv_freq[i] = std::pow(static_cast<double>(c.rope_theta),
                             -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
  }
  return w;
}

}  // namespace dualpath::model
