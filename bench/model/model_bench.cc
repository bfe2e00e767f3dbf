// RefModel speed: one layer of a 32-token prefill chunk and of one decode step over 2,048 cached
// tokens (the shapes an engine runs), the whole-model decode step, and weight generation.
//
// Counters: attn_flops/s counts only attention FLOPs (QK^T and AV: 2 * q_heads * 2 * head_dim per
// attended (query, key) pair, as kv::ModelGeometry::AttentionFlops) over the whole ForwardLayer
// time, so it is a lower bound on the attention kernel's rate; flops/s adds the projections and
// the MLP. Baseline in the same run: BM_NaiveAttention, the same decode-step attention written as
// textbook scalar loops (one accumulator per dot product), so the ratio shows what the fixed-order
// 8-lane kernels buy.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dualpath/model/ref_model.h"

namespace dualpath::model {
namespace {

constexpr uint64_t kCached = 2048;

std::unique_ptr<RefModel> Model() { return std::move(RefModel::Create(RefModelConfig{})).value(); }

// Deterministic KV values in [-1, 1) for the cached positions (timing does not depend on values,
// and a real 2K prefill would dominate the benchmark's start-up).
std::vector<std::byte> FakeKv(const RefModelConfig& c, uint64_t tokens) {
  std::vector<float> f(tokens * c.KvBytesPerTokenPerLayer() / sizeof(float));
  uint64_t s = 12345;
  for (float& x : f) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(s >> 40) * 0x1p-23f - 1.0f;
  }
  std::vector<std::byte> kv(f.size() * sizeof(float));
  std::memcpy(kv.data(), f.data(), kv.size());
  return kv;
}

double LinearFlopsPerTokenLayer(const RefModelConfig& c) {
  const double h = c.hidden();
  const double kvd = static_cast<double>(c.kv_heads) * c.head_dim;
  return 2.0 * (h * (h + 2 * kvd) + h * h + 3.0 * h * c.ffn_dim);
}

double AttnFlopsLayer(const RefModelConfig& c, uint64_t cached, uint64_t n) {
  const double pairs = double(n) * cached + double(n) * (n + 1) / 2.0;
  return pairs * 2.0 * c.q_heads * 2.0 * c.head_dim;
}

void RunForwardLayer(benchmark::State& state, uint64_t n) {
  auto model = Model();
  const RefModelConfig& c = model->config();
  auto kv = FakeKv(c, kCached + n);
  std::vector<uint32_t> tokens(n);
  for (uint64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(i * 31 % c.vocab);
  std::vector<float> embedded(n * c.hidden());
  model->Embed(tokens, embedded);
  std::vector<float> hidden;
  for (auto _ : state) {
    hidden = embedded;
    model->ForwardLayer(0, kCached, kv, hidden);
    benchmark::DoNotOptimize(hidden.data());
  }
  const double attn = AttnFlopsLayer(c, kCached, n);
  const double total = attn + LinearFlopsPerTokenLayer(c) * n;
  state.counters["attn_flops/s"] =
      benchmark::Counter(attn, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["flops/s"] =
      benchmark::Counter(total, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_PrefillChunk32Over2K(benchmark::State& state) { RunForwardLayer(state, 32); }
void BM_DecodeStepOver2K(benchmark::State& state) { RunForwardLayer(state, 1); }

// One decode step through all 8 layers plus the LM head: what a decode engine pays per token.
void BM_ModelDecodeStepOver2K(benchmark::State& state) {
  auto model = Model();
  const RefModelConfig& c = model->config();
  std::vector<std::vector<std::byte>> kv(c.layers);
  for (auto& l : kv) l = FakeKv(c, kCached + 1);
  const uint32_t tok[] = {42};
  std::vector<float> hidden(c.hidden());
  std::vector<float> logits(c.vocab);
  for (auto _ : state) {
    model->Embed(tok, hidden);
    for (uint32_t l = 0; l < c.layers; ++l) model->ForwardLayer(l, kCached, kv[l], hidden);
    model->Logits(hidden, logits);
    benchmark::DoNotOptimize(RefModel::Argmax(logits));
  }
  const double attn = AttnFlopsLayer(c, kCached, 1) * c.layers;
  state.counters["attn_flops/s"] =
      benchmark::Counter(attn, benchmark::Counter::kIsIterationInvariantRate);
}

// Baseline: the attention of one decode step (all query heads, one layer) as plain scalar loops.
void BM_NaiveAttentionDecodeOver2K(benchmark::State& state) {
  const RefModelConfig c;
  const auto kv = FakeKv(c, kCached + 1);
  std::vector<float> kvf(kv.size() / sizeof(float));
  std::memcpy(kvf.data(), kv.data(), kv.size());
  const size_t hd = c.head_dim;
  const size_t kv_dim = size_t{c.kv_heads} * hd;
  const size_t stride = 2 * kv_dim;
  const size_t ctx = kCached + 1;
  std::vector<float> q(c.hidden(), 0.1f), out(c.hidden()), scores(ctx);
  const size_t group = c.q_heads / c.kv_heads;
  for (auto _ : state) {
    for (size_t h = 0; h < c.q_heads; ++h) {
      const size_t g = h / group;
      float mx = -INFINITY;
      for (size_t j = 0; j < ctx; ++j) {
        float s = 0;
        for (size_t d = 0; d < hd; ++d) s += q[h * hd + d] * kvf[j * stride + g * hd + d];
        scores[j] = s;
        mx = std::max(mx, s);
      }
      float sum = 0;
      for (size_t j = 0; j < ctx; ++j) sum += scores[j] = std::exp(scores[j] - mx);
      for (size_t d = 0; d < hd; ++d) out[h * hd + d] = 0;
      for (size_t j = 0; j < ctx; ++j) {
        for (size_t d = 0; d < hd; ++d) {
          out[h * hd + d] += scores[j] * kvf[j * stride + kv_dim + g * hd + d];
        }
      }
      for (size_t d = 0; d < hd; ++d) out[h * hd + d] /= sum;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["attn_flops/s"] = benchmark::Counter(
      AttnFlopsLayer(c, kCached, 1), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CreateDefaultModel(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Model());
}

BENCHMARK(BM_NaiveAttentionDecodeOver2K);
BENCHMARK(BM_DecodeStepOver2K);
BENCHMARK(BM_PrefillChunk32Over2K);
BENCHMARK(BM_ModelDecodeStepOver2K);
BENCHMARK(BM_CreateDefaultModel)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dualpath::model

BENCHMARK_MAIN();
