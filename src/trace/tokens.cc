#include "dualpath/trace/tokens.h"

#include <algorithm>

#include "dualpath/common/check.h"
#include "dualpath/common/splitmix.h"

namespace dualpath::trace {
namespace {

// One splitmix64 step from x: a bijective 64-bit mix, so distinct inputs never collide before the
// reduction to the vocabulary.
uint64_t Mix(uint64_t x) { return SplitMix64(x).Next(); }

uint32_t TokenAt(uint64_t key, uint64_t index, uint32_t vocab_size) {
  return static_cast<uint32_t>(Mix(Mix(key) ^ index) % vocab_size);
}

// Distinct key spaces, so a block hash id can never produce the same stream as a session
// position key or a request tail key.
constexpr uint64_t kBlockDomain = 0x426c6f636b000000ULL;    // "Block"
constexpr uint64_t kSessionDomain = 0x53657373696f6e00ULL;  // "Session"
constexpr uint64_t kTailDomain = 0x5461696c00000000ULL;     // "Tail"

}  // namespace

void BlockTokenIds(uint64_t hash_id, uint32_t vocab_size, std::span<uint32_t> out) {
  DUALPATH_CHECK(vocab_size > 0, "BlockTokenIds: vocab_size must be positive");
  const uint64_t key = Mix(hash_id) ^ kBlockDomain;
  for (size_t j = 0; j < out.size(); ++j) {
    out[j] = TokenAt(key, j, vocab_size);
  }
}

std::vector<uint32_t> PromptTokenIds(const Session& s, size_t i, uint32_t vocab_size) {
  DUALPATH_CHECK(vocab_size > 0, "PromptTokenIds: vocab_size must be positive");
  const uint64_t prompt = PromptTokens(s, i);
  std::vector<uint32_t> out(prompt);
  const Turn& turn = s.turns[i];
  if (turn.hash_ids.empty()) {
    const uint64_t key = Mix(s.id) ^ kSessionDomain;
    for (uint64_t p = 0; p < prompt; ++p) {
      out[p] = TokenAt(key, p, vocab_size);
    }
    return out;
  }
  const uint64_t bs = s.block_size;
  DUALPATH_CHECK(bs > 0, "PromptTokenIds: session with hash ids has block_size 0");
  uint64_t filled = 0;
  for (uint64_t id : turn.hash_ids) {
    const uint64_t n = std::min(bs, prompt - filled);
    BlockTokenIds(id, vocab_size, std::span<uint32_t>(out.data() + filled, n));
    filled += n;
    if (filled == prompt) {
      break;
    }
  }
  // The tail past the listed blocks: unique to this request (session id, turn).
  const uint64_t key = Mix(Mix(s.id) ^ (uint64_t{i} << 1)) ^ kTailDomain;
  for (uint64_t p = filled; p < prompt; ++p) {
    out[p] = TokenAt(key, p, vocab_size);
  }
  return out;
}

std::vector<uint32_t> AppendTokenIds(const Session& s, size_t i, uint32_t vocab_size) {
  std::vector<uint32_t> all = PromptTokenIds(s, i, vocab_size);
  const uint64_t append = s.turns[i].append_tokens;
  return std::vector<uint32_t>(all.end() - static_cast<std::ptrdiff_t>(append), all.end());
}

}  // namespace dualpath::trace
