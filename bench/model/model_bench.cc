// RefModel speed: one layer of a 32-token prefill chunk and of one decode step over 2,048 cached
// tokens (the shapes an engine runs), whole-model decode and prefill, and weight generation.
//
// Counters: attn_flops/s counts only attention FLOPs (QK^T and AV: 2 * q_heads * 2 * head_dim per
// attended (query, key) pair, as kv::ModelGeometry::AttentionFlops) over the whole ForwardLayer
// time, so it is a lower bound on the attention kernel's rate; flops/s adds the projections and
// the MLP. Baseline in the same run: BM_NaiveAttention, the same decode-step attention written as
// textbook scalar loops (one accumulator per dot product), so the ratio shows what the fixed-order
// 8-lane kernels and the KV-row-major blocking buy (BM_NaiveAttentionChunk32Over2K for the
// prefill chunk).
//
// AVX2 vs baseline (kernel_table.h): the BM_Isa* benchmarks take the instruction set as their
// first argument (0 = baseline SSE, 1 = AVX2, forced through DUALPATH_MODEL_ISA at Create), so
// one run measures both paths on the same machine; bench/model/isa_ratio.py prints the ratios.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dualpath/model/ref_model.h"
#include "model/attention.h"
#include "model/kernel_table.h"

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
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));  // tokens decoded
  state.counters["attn_flops/s"] =
      benchmark::Counter(attn, benchmark::Counter::kIsIterationInvariantRate);
}

// A whole-model prefill of 512 new tokens after 1,536 cached ones (an agent's append over its
// context): tokens/s is what a prefill engine computes per core.
void BM_ModelPrefill512Over1536(benchmark::State& state) {
  auto model = Model();
  const RefModelConfig& c = model->config();
  constexpr uint64_t kNew = 512;
  constexpr uint64_t kCtx = 1536;
  std::vector<std::vector<std::byte>> kv(c.layers);
  for (auto& l : kv) l = FakeKv(c, kCtx + kNew);
  std::vector<uint32_t> tokens(kNew);
  for (uint64_t i = 0; i < kNew; ++i) tokens[i] = static_cast<uint32_t>(i * 17 % c.vocab);
  std::vector<float> hidden(kNew * c.hidden());
  std::vector<float> logits(c.vocab);
  for (auto _ : state) {
    model->Embed(tokens, hidden);
    for (uint32_t l = 0; l < c.layers; ++l) model->ForwardLayer(l, kCtx, kv[l], hidden);
    model->Logits(std::span<const float>(hidden).last(c.hidden()), logits);
    benchmark::DoNotOptimize(RefModel::Argmax(logits));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kNew));
  const double flops =
      (AttnFlopsLayer(c, kCtx, kNew) + LinearFlopsPerTokenLayer(c) * kNew) * c.layers;
  state.counters["flops/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// Baseline: the attention of n new tokens (all query heads, one layer) as textbook scalar loops,
// token by token, head by head; no projections or MLP, so it flatters the baseline.
void RunNaiveAttention(benchmark::State& state, uint64_t n) {
  const RefModelConfig c;
  const auto kv = FakeKv(c, kCached + n);
  std::vector<float> kvf(kv.size() / sizeof(float));
  std::memcpy(kvf.data(), kv.data(), kv.size());
  const size_t hd = c.head_dim;
  const size_t kv_dim = size_t{c.kv_heads} * hd;
  const size_t stride = 2 * kv_dim;
  const size_t group = c.q_heads / c.kv_heads;
  std::vector<float> q(n * c.hidden(), 0.1f), out(n * c.hidden()), scores(kCached + n);
  for (auto _ : state) {
    for (size_t t = 0; t < n; ++t) {
      const size_t ctx = kCached + t + 1;
      for (size_t h = 0; h < c.q_heads; ++h) {
        const size_t g = h / group;
        const float* qh = q.data() + t * c.hidden() + h * hd;
        float* oh = out.data() + t * c.hidden() + h * hd;
        float mx = -INFINITY;
        for (size_t j = 0; j < ctx; ++j) {
          float s = 0;
          for (size_t d = 0; d < hd; ++d) s += qh[d] * kvf[j * stride + g * hd + d];
          scores[j] = s;
          mx = std::max(mx, s);
        }
        float sum = 0;
        for (size_t j = 0; j < ctx; ++j) sum += scores[j] = std::exp(scores[j] - mx);
        for (size_t d = 0; d < hd; ++d) oh[d] = 0;
        for (size_t j = 0; j < ctx; ++j) {
          for (size_t d = 0; d < hd; ++d)
            oh[d] += scores[j] * kvf[j * stride + kv_dim + g * hd + d];
        }
        for (size_t d = 0; d < hd; ++d) oh[d] /= sum;
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["attn_flops/s"] = benchmark::Counter(
      AttnFlopsLayer(c, kCached, n), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_NaiveAttentionDecodeOver2K(benchmark::State& state) { RunNaiveAttention(state, 1); }
void BM_NaiveAttentionChunk32Over2K(benchmark::State& state) { RunNaiveAttention(state, 32); }

void BM_CreateDefaultModel(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Model());
}

// --- AVX2 vs baseline --------------------------------------------------------------------------

const char* IsaName(int64_t arg) { return arg == 0 ? "baseline" : "avx2"; }

// The model on a forced instruction set; nullptr (and the benchmark skipped) where the CPU lacks
// it.
std::unique_ptr<RefModel> ModelOn(benchmark::State& state, const RefModelConfig& c = {}) {
  const char* isa = IsaName(state.range(0));
  setenv(internal::kIsaEnvVar, isa, 1);
  auto m = RefModel::Create(c);
  unsetenv(internal::kIsaEnvVar);
  if (!m.ok()) {
    state.SkipWithError(m.status().ToString().c_str());
    return nullptr;
  }
  state.SetLabel(isa);
  return std::move(m).value();
}

// The attention kernel alone (one layer, default head shape): n new tokens over 2,048 cached.
void BM_IsaAttention(benchmark::State& state) {
  const char* isa = IsaName(state.range(0));
  setenv(internal::kIsaEnvVar, isa, 1);
  auto table = internal::KernelsFromEnvironment();
  unsetenv(internal::kIsaEnvVar);
  if (!table.ok()) {
    state.SkipWithError(table.status().ToString().c_str());
    return;
  }
  state.SetLabel(isa);
  const RefModelConfig c;
  const uint64_t n = static_cast<uint64_t>(state.range(1));
  const auto kv = FakeKv(c, kCached + n);
  const internal::AttentionShape shape{c.q_heads, c.kv_heads, c.head_dim,
                                       c.KvBytesPerTokenPerLayer()};
  std::vector<float> q(n * c.hidden());
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * static_cast<float>(i % 97) - 0.48f;
  std::vector<float> out(q.size()), scratch;
  for (auto _ : state) {
    table.value()->causal_attention(shape, kCached, n, q.data(), c.hidden(), kv.data(), out.data(),
                                    &scratch);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["attn_flops/s"] = benchmark::Counter(
      AttnFlopsLayer(c, kCached, n), benchmark::Counter::kIsIterationInvariantRate);
}

// A whole ForwardLayer (projections, attention, MLP): n new tokens over 2,048 cached.
void BM_IsaForwardLayer(benchmark::State& state) {
  auto model = ModelOn(state);
  if (model == nullptr) return;
  const RefModelConfig& c = model->config();
  const uint64_t n = static_cast<uint64_t>(state.range(1));
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
  state.counters["flops/s"] =
      benchmark::Counter(AttnFlopsLayer(c, kCached, n) + LinearFlopsPerTokenLayer(c) * n,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// A cold prefill of n tokens through the whole model (8 layers + LM head of the last token).
void BM_IsaColdPrefill(benchmark::State& state) {
  auto model = ModelOn(state);
  if (model == nullptr) return;
  const RefModelConfig& c = model->config();
  const uint64_t n = static_cast<uint64_t>(state.range(1));
  std::vector<std::vector<std::byte>> kv(c.layers);
  for (auto& l : kv) l.resize(n * c.KvBytesPerTokenPerLayer());
  std::vector<uint32_t> tokens(n);
  for (uint64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(i * 17 % c.vocab);
  std::vector<float> hidden(n * c.hidden());
  std::vector<float> logits(c.vocab);
  for (auto _ : state) {
    model->Embed(tokens, hidden);
    for (uint32_t l = 0; l < c.layers; ++l) model->ForwardLayer(l, 0, kv[l], hidden);
    model->Logits(std::span<const float>(hidden).last(c.hidden()), logits);
    benchmark::DoNotOptimize(RefModel::Argmax(logits));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}

BENCHMARK(BM_IsaAttention)->ArgsProduct({{0, 1}, {16, 64}});
BENCHMARK(BM_IsaForwardLayer)->ArgsProduct({{0, 1}, {1, 16, 64}});
BENCHMARK(BM_IsaColdPrefill)->ArgsProduct({{0, 1}, {1536}})->Unit(benchmark::kMillisecond);

BENCHMARK(BM_NaiveAttentionDecodeOver2K);
BENCHMARK(BM_NaiveAttentionChunk32Over2K);
BENCHMARK(BM_DecodeStepOver2K);
BENCHMARK(BM_PrefillChunk32Over2K);
BENCHMARK(BM_ModelDecodeStepOver2K);
BENCHMARK(BM_ModelPrefill512Over1536)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CreateDefaultModel)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dualpath::model

BENCHMARK_MAIN();
