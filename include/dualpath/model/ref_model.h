// RefModel: the reference CPU model the engines run when there is no GPU. A small decoder-only
// transformer (RMSNorm, GQA attention with rotary positions, SwiGLU MLP, tied-free LM head) whose
// weights are generated deterministically from a seed, so every process that builds a RefModel
// from the same RefModelConfig holds bit-identical weights and every byte of KV it produces is
// real.
//
// The property the whole end-to-end system leans on (issue 8, acceptance 1): the computation of
// one token is independent of how tokens are grouped. ForwardLayer over tokens [start, start+n)
// produces, for each token, exactly the same bits (hidden state and K/V) as running the tokens one
// at a time or in any other chunking, as long as the KV of positions [0, start) is bit-identical.
// So hit KV that arrives from storage (PE path), from a decode engine (DE path), or is recomputed
// from scratch gives bit-identical logits and tokens. Implementations keep a fixed reduction order
// per token (no batched GEMM whose blocking depends on n, no threads splitting one reduction, no
// -ffast-math).
//
// KV layout of one layer for T tokens (what `layer_kv` spans point at): [T][bpt] bytes where
// bpt = KvBytesPerTokenPerLayer() = 2 * kv_heads * head_dim * sizeof(float); per token the K
// vector (kv_heads * head_dim floats, rotary already applied) then the V vector. This is the
// kv::BlockShape layout (a Layer Block is [tokens][bpt]), so Full Blocks from storage hold
// [layers][block_tokens][bpt] of exactly these bytes.
//
// Thread safety: a RefModel is immutable after Create; all const methods may be called from any
// number of threads concurrently (they use only caller-provided buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/kv/model.h"

namespace dualpath::model {

class RankPool;

namespace internal {
struct KernelTable;
}  // namespace internal

struct RefModelConfig {
  uint32_t layers = 8;
  uint32_t q_heads = 4;
  uint32_t kv_heads = 4;  // divides q_heads (GQA); == q_heads is MHA
  uint32_t head_dim = 32;
  uint32_t ffn_dim = 256;
  uint32_t vocab = 4096;
  uint64_t seed = 1;
  float rope_theta = 10000.0f;

  uint32_t hidden() const { return q_heads * head_dim; }
  uint64_t KvBytesPerTokenPerLayer() const { return 2ull * kv_heads * head_dim * sizeof(float); }
  // Every weight: embedding, per layer (two norms, Q/K/V/O, gate/up/down), final norm, LM head.
  uint64_t ParameterCount() const;
  // kInvalidArgument naming the field (zero sizes, kv_heads not dividing q_heads, head_dim odd,
  // sizes so large the weights would exceed 1 GiB).
  Status Validate() const;
  // The kv geometry (name "ref", MHA/GQA, fp32 KV, parameter counts) so block shapes, block
  // hashing, storage fingerprints and the scheduler's token accounting work unchanged.
  kv::ModelGeometry Geometry() const;
  // Parses "layers=8,q_heads=4,kv_heads=4,head_dim=32,ffn_dim=256,vocab=4096,seed=1" (any subset;
  // the rest keep their defaults). kInvalidArgument naming the bad key or value.
  static Result<RefModelConfig> Parse(std::string_view spec);
  std::string ToString() const;  // the Parse format, every key
};

class RefModel {
 public:
  // Also picks the kernels' instruction set: AVX2 where the CPU has it, else the baseline SSE
  // path; DUALPATH_MODEL_ISA=baseline|avx2|auto overrides (docs/model.md). Both paths give
  // bit-identical results. kInvalidArgument for a bad config or DUALPATH_MODEL_ISA value,
  // kFailedPrecondition for DUALPATH_MODEL_ISA=avx2 on a CPU without AVX2.
  static Result<std::unique_ptr<RefModel>> Create(const RefModelConfig& config);
  ~RefModel();
  RefModel(const RefModel&) = delete;
  RefModel& operator=(const RefModel&) = delete;

  const RefModelConfig& config() const;
  // The instruction set of the kernels in use: "avx2" or "baseline".
  std::string_view isa() const;

  // hidden[i * hidden() ...] = embedding of tokens[i]. tokens must be < vocab (checked: a bad id is
  // a programming error here; callers validate request input first).
  void Embed(std::span<const uint32_t> tokens, std::span<float> hidden) const;

  // Runs layer `layer` for the n = hidden.size() / hidden() tokens at positions [start, start+n).
  // layer_kv spans (start + n) * bpt bytes: [0, start) is the cached KV of this layer (read),
  // [start, start + n) is written with the new tokens' K/V. hidden is updated in place (the
  // residual stream). Causal: token start+i attends to positions [0, start+i].
  // layer_kv may be longer than (start + n) * bpt (e.g. a whole request's buffer); bytes beyond
  // (start + n) * bpt are neither read nor written. Sizes are checked (abort on a caller bug).
  // No threads inside: callers parallelize across requests.
  void ForwardLayer(uint32_t layer, uint64_t start, std::span<std::byte> layer_kv,
                    std::span<float> hidden) const;

  // One sequence of a forward batch (ForwardLayerBatch): its n new tokens at positions
  // [start, start + n) and this layer's KV of the sequence, exactly as ForwardLayer takes them.
  struct BatchSeq {
    uint64_t start = 0;
    uint64_t n = 0;
    std::span<std::byte> layer_kv;  // [0, start) read, [start, start + n) written
    uint32_t rank = 0;  // where its attention runs (the ForwardLayerBatch overload with a pool)
  };

  // Runs layer `layer` for a batch of sequences of ragged lengths, each with its own KV (a decode
  // step of many requests, or chunks of several prompts). hidden holds the rows of every
  // sequence, sequence i's n_i rows right after sequence i-1's (sum n_i rows in all). The
  // projections and the MLP run over all rows together (the weights stream once per group of
  // rows, not once per sequence); rotary, KV writes and attention are per sequence. Batching
  // joins chunking in the invariance property: each sequence's KV and hidden rows are
  // bit-identical to ForwardLayer(layer, start, layer_kv, its rows) run alone, whatever else is
  // in the batch and in which order (no reduction crosses rows). Sequences with n == 0 are
  // skipped. Two sequences must not share KV bytes that one of them writes. Sizes are checked
  // (abort on a caller bug).
  void ForwardLayerBatch(uint32_t layer, std::span<const BatchSeq> seqs,
                         std::span<float> hidden) const;

  // The same batch on the ranks of an engine (rank_pool.h): the projections and the MLP run over
  // all rows on the calling thread (one weights pass per layer, as before), and sequence i's
  // rotary, KV writes and attention run on rank seqs[i].rank (< pool->ranks(), checked), every
  // rank at once; the layer goes on when the slowest rank is done. The bits are those of the
  // overload above (a sequence's arithmetic does not depend on the thread it runs on, and no two
  // ranks write the same bytes: sequences must not share written KV, as above). rank_cpu_ns
  // (pool->ranks() entries) gets each rank's attention time of this call added, measured as the
  // rank thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared CPU a rank's own work, not its
  // waits for a core, which is what a GPU rank would spend.
  void ForwardLayerBatch(uint32_t layer, std::span<const BatchSeq> seqs, std::span<float> hidden,
                         RankPool& pool, std::span<int64_t> rank_cpu_ns) const;

  // Final norm + LM head of one token's hidden row → vocab logits.
  void Logits(std::span<const float> hidden_row, std::span<float> logits) const;
  // The same for n rows (hidden_rows: n x hidden(), logits: n x vocab), the LM head streamed once
  // per group of rows; row i's logits are bit-identical to Logits of row i alone.
  void LogitsRows(std::span<const float> hidden_rows, std::span<float> logits) const;

  // Greedy sampling: the lowest index among the maximal logits.
  static uint32_t Argmax(std::span<const float> logits);
  // A 64-bit digest of the logits' exact bits (for bit-identity checks across processes).
  static uint64_t LogitsDigest(std::span<const float> logits);

 private:
  struct Weights;
  RefModel(const RefModelConfig& config, const internal::KernelTable* kernels);
  // One pass of ForwardLayerBatch over at most kSubChunk rows in all (ref_model.cc).
  // pool null: every sequence's attention on the calling thread (rank_cpu_ns unused).
  void ForwardBatch(uint32_t layer, std::span<const BatchSeq> seqs, std::span<float> hidden,
                    RankPool* pool, std::span<int64_t> rank_cpu_ns) const;
  void ForwardPass(uint32_t layer, std::span<const BatchSeq> seqs, std::span<float> hidden,
                   RankPool* pool, std::span<int64_t> rank_cpu_ns) const;
  RefModelConfig config_;
  std::unique_ptr<Weights> w_;
  const internal::KernelTable* kernels_;  // a static table (kernel_table.h), never null
};

// What a request produced: the tokens generated (greedy) and the digest of the first generated
// token's logits. Engines report this; the checker compares it with a from-scratch recompute.
struct Generation {
  std::vector<uint32_t> tokens;
  uint64_t first_logits_digest = 0;
  bool operator==(const Generation&) const = default;
};

// The from-scratch reference for one request, with teacher forcing: prefill `prompt` from empty
// KV, the first generated token is Argmax(logits of the last prompt token); then for j = 1 ..
// gen_tokens - 1 the decode step feeds teacher[j - 1] (the recorded token at that position, not
// the model's own choice, so the next turn's prompt and block hashes are independent of model
// output) at position prompt.size() + j - 1 and records Argmax of its logits. Returns
// gen_tokens tokens. If kv_out is not null it receives the KV of every computed position
// ([layers][prompt.size() + gen_tokens - 1][bpt]). teacher.size() must be >= gen_tokens - 1.
// prompt must not be empty and every token must be < vocab (checked: abort; ReferenceSession::Run
// returns a Status instead). gen_tokens == 0 runs the prefill only: no tokens, the digest of the
// logits of the last prompt token, and kv_out holds the prompt's positions.
// Incremental form for many requests sharing prefixes: ReferenceSession (reference_session.h).
Generation Reference(const RefModel& model, std::span<const uint32_t> prompt,
                     std::span<const uint32_t> teacher, uint32_t gen_tokens,
                     std::vector<std::byte>* kv_out = nullptr);

// Free-running greedy decoding (no teacher): each decode step feeds the previous step's argmax.
// Equals Reference(model, prompt, teacher = tokens[0, gen_tokens - 1), gen_tokens). For debugging
// (`dualpath model generate`); the system itself always uses teacher forcing.
Generation Greedy(const RefModel& model, std::span<const uint32_t> prompt, uint32_t gen_tokens);

}  // namespace dualpath::model
