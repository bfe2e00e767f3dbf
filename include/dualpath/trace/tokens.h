// Deterministic token ids for replaying token-less traces.
//
// None of the public traces carries token ids; an engine that runs a real (or reference) model
// needs them, and they must be consistent with the trace's cache structure: equal hash ids give
// equal token blocks (so prefix hits in the trace are prefix hits in the engine's own block
// hashes), and different hash ids give different blocks with overwhelming probability.
//
//  - Sessions with hash ids: block k of the prompt is BlockTokenIds(hash_ids[k]); prompt tokens
//    past the last listed block (the trace lists full blocks only) are unique to the request.
//  - Sessions without hash ids (synthetic): the token at position p of session s is a function of
//    (s.id, p), so every prompt is a prefix-extension of the previous context, as Appendix A.3
//    replays it. The generated positions get tokens too, as if the model produced exactly them;
//    an engine that keeps its own generated tokens uses AppendTokenIds instead.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {

// Fills `out` with the tokens of the block named hash_id (ids in [0, vocab_size)). vocab_size > 0.
void BlockTokenIds(uint64_t hash_id, uint32_t vocab_size, std::span<uint32_t> out);

// All PromptTokens(s, i) token ids of turn i.
std::vector<uint32_t> PromptTokenIds(const Session& s, size_t i, uint32_t vocab_size);

// Only the turn's new tokens: the last append_tokens of PromptTokenIds(s, i).
std::vector<uint32_t> AppendTokenIds(const Session& s, size_t i, uint32_t vocab_size);

}  // namespace dualpath::trace
