// ReferenceSession: the incremental form of model::Reference for checking many requests that
// share prefixes (an agent's turns), used by the replayer's correctness check (docs/e2e.md).
//
// A session holds the KV (all layers) of one token sequence: the positions computed by the last
// Run(). Run(prompt, teacher, gen_tokens) reuses the KV of the longest common prefix of that
// sequence and the new request's computed positions (prompt + teacher[0, gen_tokens - 1)), capped
// at prompt.size() - 1 because the last prompt token's logits are needed, and computes only the
// rest, as one ForwardLayer chunk per layer. Because ForwardLayer is chunking-invariant, the
// result is bit-identical to Reference() (the tests compare them): per agent the check costs one
// pass over the final context instead of one per turn.
//
// Ownership: the session borrows the RefModel (which must outlive it) and owns its KV buffers
// ([layers] x [tokens][bpt], grown as needed; Clear() frees them).
// Thread safety: a session is used by one thread at a time; distinct sessions over the same
// RefModel may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/model/ref_model.h"

namespace dualpath::model {

class ReferenceSession {
 public:
  explicit ReferenceSession(const RefModel& model);

  // The same Generation as Reference(model, prompt, teacher, gen_tokens). Unlike Reference (which
  // checks its preconditions and aborts), bad request input is a Status: kInvalidArgument for an
  // empty prompt, a token id >= vocab, or teacher.size() < gen_tokens - 1. On error the session
  // keeps its previous sequence.
  Result<Generation> Run(std::span<const uint32_t> prompt, std::span<const uint32_t> teacher,
                         uint32_t gen_tokens);

  // The token sequence whose KV the session holds (the last Run's computed positions).
  std::span<const uint32_t> tokens() const { return tokens_; }
  // KV of layer `layer`, [tokens().size()][bpt] bytes (what Reference's kv_out holds per layer).
  std::span<const std::byte> layer_kv(uint32_t layer) const;

  // Positions computed and reused over the session's life (the reuse the checker gets).
  uint64_t computed_tokens() const { return computed_tokens_; }
  uint64_t reused_tokens() const { return reused_tokens_; }

  // Forgets the sequence and frees the KV (e.g. when an agent's session ends).
  void Clear();

 private:
  const RefModel& model_;
  std::vector<uint32_t> tokens_;
  std::vector<std::vector<std::byte>> kv_;  // [layers], each [capacity tokens][bpt]
  uint64_t computed_tokens_ = 0;
  uint64_t reused_tokens_ = 0;
};

}  // namespace dualpath::model
