// Workload statistics in the definitions of DualPath Table 2 plus the ideal prefix-cache hit ratio.
#include "dualpath/common/stats.h"

#include <algorithm>
#include <cstddef>
#include <unordered_set>
#include <vector>

#include "dualpath/common/check.h"
#include "dualpath/trace/workload.h"

namespace dualpath::trace {
namespace {

struct RequestRef {
  double time;
  size_t session;
  size_t turn;
};

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

bool HasHashIds(const Session& s) {
  return std::any_of(s.turns.begin(), s.turns.end(),
                     [](const Turn& t) { return !t.hash_ids.empty(); });
}

// Hits of hash-id sessions: an infinite cache that holds every block any earlier request's prompt
// carried. Walks requests in (approximate) time order, since a block can only hit after some
// request produced it.
void HashHits(const Workload& w, const std::vector<std::vector<uint64_t>>& contexts,
              std::vector<std::vector<uint64_t>>& hits) {
  std::vector<RequestRef> requests;
  for (size_t si = 0; si < w.sessions.size(); ++si) {
    const Session& s = w.sessions[si];
    if (!HasHashIds(s)) {
      continue;
    }
    double t = s.start_s;
    for (size_t ti = 0; ti < s.turns.size(); ++ti) {
      const Turn& turn = s.turns[ti];
      t += turn.think_time_s;
      requests.push_back({turn.arrival_s >= 0 ? turn.arrival_s : t, si, ti});
    }
  }
  std::stable_sort(requests.begin(), requests.end(),
                   [](const RequestRef& a, const RequestRef& b) { return a.time < b.time; });
  std::unordered_set<uint64_t> seen;
  for (const RequestRef& r : requests) {
    const Session& s = w.sessions[r.session];
    const Turn& turn = s.turns[r.turn];
    uint64_t k = 0;
    while (k < turn.hash_ids.size() && seen.count(turn.hash_ids[k]) != 0) {
      ++k;
    }
    const uint64_t prompt = contexts[r.session][r.turn] + turn.append_tokens;
    hits[r.session][r.turn] = std::min(k * s.block_size, prompt);
    seen.insert(turn.hash_ids.begin(), turn.hash_ids.end());
  }
}

}  // namespace

std::vector<std::vector<uint64_t>> IdealHitTokens(const Workload& w, uint32_t block_size) {
  DUALPATH_CHECK(block_size > 0, "IdealHitTokens: block_size must be positive");
  std::vector<std::vector<uint64_t>> contexts;
  contexts.reserve(w.sessions.size());
  std::vector<std::vector<uint64_t>> hits(w.sessions.size());
  bool any_hash_ids = false;
  for (size_t si = 0; si < w.sessions.size(); ++si) {
    const Session& s = w.sessions[si];
    contexts.push_back(Contexts(s));
    hits[si].assign(s.turns.size(), 0);
    if (HasHashIds(s)) {
      any_hash_ids = true;
      continue;
    }
    for (size_t i = 0; i < s.turns.size(); ++i) {
      hits[si][i] = contexts[si][i] / block_size * block_size;
    }
  }
  if (any_hash_ids) {
    HashHits(w, contexts, hits);
  }
  return hits;
}

WorkloadStats ComputeStats(const Workload& w, uint32_t block_size) {
  DUALPATH_CHECK(block_size > 0, "ComputeStats: block_size must be positive");
  WorkloadStats st;
  st.block_size = block_size;
  st.sessions = w.sessions.size();
  const std::vector<std::vector<uint64_t>> hits = IdealHitTokens(w, block_size);
  uint64_t append_sum = 0;
  uint64_t gen_sum = 0;
  uint64_t nonempty = 0;
  std::vector<uint64_t> turn_counts;
  turn_counts.reserve(w.sessions.size());
  for (size_t si = 0; si < w.sessions.size(); ++si) {
    const Session& s = w.sessions[si];
    if (s.turns.empty()) {
      continue;
    }
    ++nonempty;
    turn_counts.push_back(s.turns.size());
    const std::vector<uint64_t> contexts = Contexts(s);
    // Blocks of hash-id sessions are counted in the trace's own block size.
    const uint64_t bs = HasHashIds(s) ? std::max<uint32_t>(s.block_size, 1) : block_size;
    uint64_t s_append = 0;
    uint64_t s_gen = 0;
    uint64_t s_prompt = 0;
    uint64_t s_hit = 0;
    for (size_t i = 0; i < s.turns.size(); ++i) {
      const Turn& t = s.turns[i];
      const uint64_t prompt = contexts[i] + t.append_tokens;
      s_append += t.append_tokens;
      s_gen += t.gen_tokens;
      s_prompt += prompt;
      s_hit += hits[si][i];
      st.prompt_blocks += CeilDiv(prompt, bs);
      st.hit_blocks += CeilDiv(hits[si][i], bs);
    }
    const double n = static_cast<double>(s.turns.size());
    st.turns += s.turns.size();
    st.append_mean += static_cast<double>(s_append) / n;
    st.gen_mean += static_cast<double>(s_gen) / n;
    st.context_mean += static_cast<double>(s_prompt) / n;
    st.total_mean += static_cast<double>(contexts.back());
    if (s_prompt > 0) {
      st.session_hit_ratio_mean += static_cast<double>(s_hit) / static_cast<double>(s_prompt);
    }
    append_sum += s_append;
    gen_sum += s_gen;
    st.prompt_tokens += s_prompt;
    st.hit_tokens += s_hit;
  }
  if (nonempty > 0) {
    // Sessions without turns (never produced by the readers) do not dilute the means.
    const double n = static_cast<double>(nonempty);
    st.turns_per_session = static_cast<double>(st.turns) / n;
    st.append_mean /= n;
    st.gen_mean /= n;
    st.context_mean /= n;
    st.total_mean /= n;
    st.session_hit_ratio_mean /= n;
    st.turns_median = Percentile(turn_counts, 0.5);  // nearest rank: the lower middle
    st.turns_max = *std::max_element(turn_counts.begin(), turn_counts.end());
  }
  if (st.turns > 0) {
    const double r = static_cast<double>(st.turns);
    st.append_per_request = static_cast<double>(append_sum) / r;
    st.gen_per_request = static_cast<double>(gen_sum) / r;
    st.prompt_per_request = static_cast<double>(st.prompt_tokens) / r;
  }
  if (st.prompt_tokens > 0) {
    st.ideal_hit_ratio = static_cast<double>(st.hit_tokens) / static_cast<double>(st.prompt_tokens);
  }
  if (st.prompt_blocks > 0) {
    st.ideal_block_hit_ratio =
        static_cast<double>(st.hit_blocks) / static_cast<double>(st.prompt_blocks);
  }
  return st;
}

}  // namespace dualpath::trace
