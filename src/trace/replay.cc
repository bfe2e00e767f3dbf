// Replay arithmetic of DualPath Appendix A.3 (see workload.h).
#include <algorithm>

#include "dualpath/common/check.h"
#include "dualpath/trace/workload.h"

namespace dualpath::trace {

std::vector<uint64_t> Contexts(const Session& s) {
  std::vector<uint64_t> out;
  out.reserve(s.turns.size() + 1);
  uint64_t context = 0;
  for (const Turn& t : s.turns) {
    // A recorded compaction keeps only a prefix of the previous context.
    context = std::min(context, t.keep_tokens);
    out.push_back(context);
    context += t.append_tokens + t.gen_tokens;
  }
  out.push_back(context);
  return out;
}

uint64_t ContextTokens(const Session& s, size_t i) {
  DUALPATH_CHECK(i < s.turns.size(), "ContextTokens: turn index out of range");
  uint64_t context = 0;
  for (size_t j = 0; j <= i; ++j) {
    const Turn& t = s.turns[j];
    context = std::min(context, t.keep_tokens);
    if (j == i) {
      break;
    }
    context += t.append_tokens + t.gen_tokens;
  }
  return context;
}

uint64_t PromptTokens(const Session& s, size_t i) {
  return ContextTokens(s, i) + s.turns[i].append_tokens;
}

uint64_t HitTokens(const Session& s, size_t i, uint32_t block_size) {
  DUALPATH_CHECK(block_size > 0, "HitTokens: block_size must be positive");
  return ContextTokens(s, i) / block_size * block_size;
}

uint64_t TotalTokens(const Session& s) { return Contexts(s).back(); }

}  // namespace dualpath::trace
