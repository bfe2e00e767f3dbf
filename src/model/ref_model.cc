// RefModel: creation, embedding, one decoder layer, the LM head.
//
// Chunking and batch invariance (ref_model.h) hold because every quantity of token t is computed
// from token t's own row (norms, projections, rotary, MLP) or from its own sequence's KV rows
// [0, start + t] in increasing position order (attention), with the fixed-order reductions of
// kernels.h. Nothing sums across the rows of one call, and nothing depends on n, start, the other
// sequences of a batch or the token-group blocking. ForwardLayer is a batch of one sequence.
#include "dualpath/model/ref_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <string>

#include "dualpath/common/check.h"
#include "dualpath/model/rank_pool.h"
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
  const size_t h = config_.hidden();
  DUALPATH_CHECK(hidden.size() % h == 0, "ForwardLayer: hidden is not a whole number of rows");
  const BatchSeq one{start, hidden.size() / h, layer_kv};
  ForwardLayerBatch(layer, {&one, 1}, hidden);
}

void RefModel::ForwardLayerBatch(uint32_t layer, std::span<const BatchSeq> seqs,
                                 std::span<float> hidden) const {
  ForwardBatch(layer, seqs, hidden, nullptr, {});
}

void RefModel::ForwardLayerBatch(uint32_t layer, std::span<const BatchSeq> seqs,
                                 std::span<float> hidden, RankPool& pool,
                                 std::span<int64_t> rank_cpu_ns) const {
  DUALPATH_CHECK(rank_cpu_ns.size() == pool.ranks(),
                 "ForwardLayerBatch: rank_cpu_ns must hold one entry per rank");
  for (const BatchSeq& s : seqs) {
    DUALPATH_CHECK(s.rank < pool.ranks(), "ForwardLayerBatch: sequence rank " +
                                              std::to_string(s.rank) + " >= ranks " +
                                              std::to_string(pool.ranks()));
  }
  ForwardBatch(layer, seqs, hidden, &pool, rank_cpu_ns);
}

void RefModel::ForwardBatch(uint32_t layer, std::span<const BatchSeq> seqs, std::span<float> hidden,
                            RankPool* pool, std::span<int64_t> rank_cpu_ns) const {
  const RefModelConfig& c = config_;
  const size_t h = c.hidden();
  const uint64_t bpt = c.KvBytesPerTokenPerLayer();
  DUALPATH_CHECK(layer < c.layers, "ForwardLayer: layer " + std::to_string(layer) + " >= layers");
  DUALPATH_CHECK(hidden.size() % h == 0, "ForwardLayer: hidden is not a whole number of rows");
  uint64_t rows = 0;
  for (const BatchSeq& s : seqs) {
    const uint64_t end = s.start + s.n;
    DUALPATH_CHECK(s.layer_kv.size() >= end * bpt,
                   "ForwardLayer: layer_kv holds " + std::to_string(s.layer_kv.size()) +
                       " bytes, need (start + n) * bpt = " + std::to_string(end * bpt));
    rows += s.n;
  }
  DUALPATH_CHECK(rows * h == hidden.size(), "ForwardLayerBatch: hidden holds " +
                                                std::to_string(hidden.size() / h) +
                                                " rows, the sequences " + std::to_string(rows));
  // Passes of at most kSubChunk rows: scratch stays ~1.5 MiB instead of 6 KiB per row (184 MiB
  // for a 30K-token prefill). A sequence longer than what is left of a pass is cut at that point
  // and continues in the next pass from the position where it was cut; chunking invariance makes
  // the bits the same as one call.
  std::vector<BatchSeq> pass;
  size_t pass_rows = 0;
  size_t row0 = 0;  // first row of the current pass in hidden
  auto flush = [&] {
    if (pass_rows == 0) return;
    ForwardPass(layer, pass, hidden.subspan(row0 * h, pass_rows * h), pool, rank_cpu_ns);
    row0 += pass_rows;
    pass.clear();
    pass_rows = 0;
  };
  for (const BatchSeq& s : seqs) {
    uint64_t done = 0;
    while (done < s.n) {
      const uint64_t m = std::min<uint64_t>(s.n - done, kSubChunk - pass_rows);
      pass.push_back({s.start + done, m, s.layer_kv, s.rank});
      pass_rows += m;
      done += m;
      if (pass_rows == kSubChunk) flush();
    }
  }
  flush();
}

namespace {

int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void RefModel::ForwardPass(uint32_t layer, std::span<const BatchSeq> seqs, std::span<float> hidden,
                           RankPool* pool, std::span<int64_t> rank_cpu_ns) const {
  const RefModelConfig& c = config_;
  const size_t h = c.hidden();
  const size_t hd = c.head_dim;
  const size_t q_dim = h;
  const size_t kv_dim = size_t{c.kv_heads} * hd;
  const size_t ffn = c.ffn_dim;
  const size_t bpt = c.KvBytesPerTokenPerLayer();
  const size_t n = hidden.size() / h;  // rows of all sequences together
  if (n == 0) return;
  const LayerWeights& lw = w_->layers[layer];
  const size_t qkv_rows = q_dim + 2 * kv_dim;

  // One scratch allocation per pass: normed input, Q/K/V, attention output, MLP activations.
  std::vector<float> scratch(n * h + n * qkv_rows + n * q_dim + n * 2 * ffn + n * ffn + n * h);
  float* xn = scratch.data();
  float* qkv = xn + n * h;
  float* attn = qkv + n * qkv_rows;
  float* gate_up = attn + n * q_dim;
  float* act = gate_up + n * 2 * ffn;
  float* proj = act + n * ffn;

  // Attention input: RMSNorm, then Q, K, V for every row of every sequence (each output is one
  // row's own dot product: which rows share a pass changes nothing).
  const internal::KernelTable& k = *kernels_;
  k.rms_norm_rows(hidden.data(), lw.attn_norm.data(), h, n, xn);
  k.mat_vec_tokens(lw.wqkv.data(), qkv_rows, h, xn, qkv, n);

  // Per sequence: rotary positions on Q and K (angles in double, rounded once), K/V into the
  // sequence's cache, then causal attention of each new token over positions [0, start + t]
  // of that sequence only (attention.h). Each sequence touches only its own rows of qkv and attn
  // and its own KV, so the sequences of different ranks run at the same time without sharing a
  // byte they write.
  internal::AttentionShape shape{c.q_heads, c.kv_heads, hd, bpt};
  std::vector<size_t> first_row(seqs.size());
  for (size_t i = 0, row = 0; i < seqs.size(); ++i) {
    first_row[i] = row;
    row += seqs[i].n;
  }
  // The sequences of `rank` (all of them when rank < 0), with that thread's own rotary table and
  // attention scratch.
  auto attend = [&](int64_t rank) {
    std::vector<float> rot(hd);
    float* cos_v = rot.data();
    float* sin_v = cos_v + hd / 2;
    std::vector<float> attn_scratch;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const BatchSeq& s = seqs[i];
      if (s.n == 0 || (rank >= 0 && s.rank != static_cast<uint64_t>(rank))) continue;
      std::byte* kv = s.layer_kv.data();
      const size_t row = first_row[i];
      for (size_t t = 0; t < s.n; ++t) {
        const uint64_t pos = s.start + t;
        for (size_t j = 0; j < hd / 2; ++j) {
          const double angle = static_cast<double>(pos) * w_->inv_freq[j];
          cos_v[j] = static_cast<float>(std::cos(angle));
          sin_v[j] = static_cast<float>(std::sin(angle));
        }
        float* r = qkv + (row + t) * qkv_rows;
        ApplyRotary(r, c.q_heads, hd, cos_v, sin_v);
        ApplyRotary(r + q_dim, c.kv_heads, hd, cos_v, sin_v);
        std::memcpy(kv + pos * bpt, r + q_dim, 2 * kv_dim * sizeof(float));  // K then V
      }
      k.causal_attention(shape, s.start, s.n, qkv + row * qkv_rows, qkv_rows, kv,
                         attn + row * q_dim, &attn_scratch);
    }
  };
  if (pool == nullptr) {
    attend(-1);
  } else {
    // Each rank adds only to its own entry of rank_cpu_ns; Run's return orders those writes
    // before the caller reads them.
    // An idle rank records no time (its own overhead would read as attention).
    std::vector<uint8_t> busy(pool->ranks(), 0);
    for (const BatchSeq& s : seqs) busy[s.rank] |= s.n != 0 ? 1 : 0;
    pool->Run([&](uint32_t rank) {
      if (busy[rank] == 0) return;
      const int64_t t0 = ThreadCpuNs();
      attend(rank);
      rank_cpu_ns[rank] += ThreadCpuNs() - t0;
    });
  }

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

void RefModel::LogitsRows(std::span<const float> hidden_rows, std::span<float> logits) const {
  const size_t h = config_.hidden();
  const size_t vocab = config_.vocab;
  DUALPATH_CHECK(hidden_rows.size() % h == 0, "LogitsRows: hidden is not a whole number of rows");
  const size_t n = hidden_rows.size() / h;
  DUALPATH_CHECK(logits.size() == n * vocab, "LogitsRows: logits must hold rows x vocab floats");
  if (n == 0) return;
  std::vector<float> xn(n * h);
  kernels_->rms_norm_rows(hidden_rows.data(), w_->final_norm.data(), h, n, xn.data());
  // MatVecTokens' outputs are Dot(row, x) exactly as MatVec's (kernels.h), so each row's logits
  // have the bits of Logits(row).
  kernels_->mat_vec_tokens(w_->lm_head.data(), vocab, h, xn.data(), logits.data(), n);
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
