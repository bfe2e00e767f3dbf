// Helpers for the model tests: small configurations, seeded token streams, and a chunked prefill
// driver that records every position's KV (all layers) and logits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "dualpath/model/ref_model.h"

namespace dualpath::model::testing {

// GQA (2 query heads per KV head), dims that are multiples of 8.
inline RefModelConfig SmallGqa(uint64_t seed = 7) {
  RefModelConfig c;
  c.layers = 2;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 24;
  c.vocab = 97;
  c.seed = seed;
  return c;
}

// MHA with head_dim 10, hidden 30, ffn 20: every dot product has a tail (n % 8 != 0).
inline RefModelConfig OddMha() {
  RefModelConfig c;
  c.layers = 3;
  c.q_heads = 3;
  c.kv_heads = 3;
  c.head_dim = 10;
  c.ffn_dim = 20;
  c.vocab = 50;
  c.seed = 11;
  return c;
}

inline std::vector<uint32_t> RandomTokens(size_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> out(n);
  for (auto& t : out) t = static_cast<uint32_t>(rng() % vocab);
  return out;
}

inline std::unique_ptr<RefModel> MakeModel(const RefModelConfig& c) {
  auto m = RefModel::Create(c);
  if (!m.ok()) return nullptr;
  return std::move(m).value();
}

// Everything a prefill produced: KV [layers][tokens][bpt] and logits [tokens][vocab].
struct PrefillResult {
  std::vector<std::byte> kv;
  std::vector<float> logits;
};

// Prefills `tokens` in chunks of the given sizes (summing to tokens.size()), each chunk through
// every layer, as a prefill engine does. Positions [0, from) must already be in `result->kv`
// (from another run); only positions >= from are computed, and only their logits are written.
// `exact_spans`: pass ForwardLayer exactly (start + n) * bpt bytes instead of the whole buffer.
inline void PrefillChunks(const RefModel& model, std::span<const uint32_t> tokens,
                          std::span<const size_t> chunks, size_t from, bool exact_spans,
                          PrefillResult* result) {
  const RefModelConfig& c = model.config();
  const size_t total = tokens.size();
  const size_t bpt = c.KvBytesPerTokenPerLayer();
  const size_t h = c.hidden();
  result->kv.resize(size_t{c.layers} * total * bpt);
  result->logits.resize(total * c.vocab);
  size_t start = from;
  for (size_t n : chunks) {
    std::vector<float> hidden(n * h);
    model.Embed(tokens.subspan(start, n), hidden);
    for (uint32_t l = 0; l < c.layers; ++l) {
      const size_t span_tokens = exact_spans ? start + n : total;
      model.ForwardLayer(
          l, start, std::span<std::byte>(result->kv.data() + l * total * bpt, span_tokens * bpt),
          hidden);
    }
    for (size_t i = 0; i < n; ++i) {
      model.Logits(std::span<const float>(hidden).subspan(i * h, h),
                   std::span<float>(result->logits).subspan((start + i) * c.vocab, c.vocab));
    }
    start += n;
  }
}

inline PrefillResult PrefillOneCall(const RefModel& model, std::span<const uint32_t> tokens) {
  PrefillResult r;
  const size_t n = tokens.size();
  PrefillChunks(model, tokens, std::span<const size_t>(&n, 1), 0, false, &r);
  return r;
}

}  // namespace dualpath::model::testing
