#include "dualpath/replay/checker.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <unordered_map>

namespace dualpath::replay {
namespace {

// One agent's model state: the tokens whose KV is computed, and that KV per layer
// ([positions][bpt] bytes, the layout ForwardLayer reads and writes).
class AgentState {
 public:
  explicit AgentState(const model::RefModel& m)
      : m_(m),
        bpt_(m.config().KvBytesPerTokenPerLayer()),
        hidden_dim_(m.config().hidden()),
        kv_(m.config().layers) {}

  // Runs `tokens` at positions [history.size(), ...); returns the logits of the last one.
  void Extend(std::span<const uint32_t> tokens, std::vector<float>& logits) {
    const uint64_t start = history_.size();
    const size_t n = tokens.size();
    std::vector<float> hidden(n * hidden_dim_);
    m_.Embed(tokens, hidden);
    for (uint32_t l = 0; l < kv_.size(); ++l) {
      kv_[l].resize((start + n) * bpt_);
      m_.ForwardLayer(l, start, kv_[l], hidden);
    }
    logits.resize(m_.config().vocab);
    m_.Logits(std::span<const float>(hidden).subspan((n - 1) * hidden_dim_, hidden_dim_), logits);
    history_.insert(history_.end(), tokens.begin(), tokens.end());
  }

  // Keeps the KV of the first `positions` tokens only.
  void Truncate(size_t positions) {
    history_.resize(positions);
    for (auto& layer : kv_) layer.resize(positions * bpt_);
  }

  const std::vector<uint32_t>& history() const { return history_; }

 private:
  const model::RefModel& m_;
  uint64_t bpt_;
  uint32_t hidden_dim_;
  std::vector<uint32_t> history_;
  std::vector<std::vector<std::byte>> kv_;
};

// The same computation as model::Reference for one turn, reusing the agent's computed prefix.
model::Generation RunTurn(AgentState& st, const TurnSpec& t) {
  const std::vector<uint32_t>& hist = st.history();
  size_t lcp = 0;
  while (lcp < hist.size() && lcp < t.prompt.size() && hist[lcp] == t.prompt[lcp]) ++lcp;
  // At least the last prompt token runs: its logits give the first generated token.
  const size_t start = std::min(lcp, t.prompt.size() - 1);
  st.Truncate(start);
  std::vector<float> logits;
  st.Extend(std::span<const uint32_t>(t.prompt).subspan(start), logits);
  model::Generation g;
  g.first_logits_digest = model::RefModel::LogitsDigest(logits);
  g.tokens.push_back(model::RefModel::Argmax(logits));
  for (uint32_t j = 1; j < t.gen_tokens; ++j) {
    // Teacher forcing: the recorded token goes in, the model's choice is only recorded.
    const uint32_t fed = t.teacher[j - 1];
    st.Extend(std::span<const uint32_t>(&fed, 1), logits);
    g.tokens.push_back(model::RefModel::Argmax(logits));
  }
  return g;
}

Status ValidateTurn(const TurnSpec& t, uint32_t vocab, uint64_t agent) {
  const std::string where = "agent " + std::to_string(agent) + " turn " + std::to_string(t.turn);
  if (t.prompt.empty()) return InvalidArgument(where + ": empty prompt");
  if (t.gen_tokens == 0) return InvalidArgument(where + ": gen_tokens is 0");
  if (t.teacher.size() + 1 < t.gen_tokens) {
    return InvalidArgument(where + ": " + std::to_string(t.teacher.size()) +
                           " teacher tokens for " + std::to_string(t.gen_tokens) + " generated");
  }
  for (uint32_t id : t.prompt) {
    if (id >= vocab)
      return InvalidArgument(where + ": token id " + std::to_string(id) + " >= vocab " +
                             std::to_string(vocab));
  }
  for (uint32_t id : t.teacher) {
    if (id >= vocab)
      return InvalidArgument(where + ": teacher token id " + std::to_string(id) + " >= vocab " +
                             std::to_string(vocab));
  }
  return Status::Ok();
}

}  // namespace

Result<References> ComputeReferences(const ReplayWorkload& workload, const model::RefModel& model,
                                     unsigned threads) {
  for (const Agent& a : workload.agents) {
    for (const TurnSpec& t : a.turns) {
      RETURN_IF_ERROR(ValidateTurn(t, model.config().vocab, a.id));
    }
  }
  References refs(workload.agents.size());
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(workload.agents.size()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t a = next++; a < workload.agents.size(); a = next++) {
      AgentState st(model);
      for (const TurnSpec& t : workload.agents[a].turns) refs[a].push_back(RunTurn(st, t));
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return refs;
}

CheckResult CheckRecords(const ReplayWorkload& workload, const References& refs,
                         const std::vector<RequestRecord>& records) {
  std::unordered_map<uint64_t, size_t> agent_index;
  for (size_t a = 0; a < workload.agents.size(); ++a) agent_index[workload.agents[a].id] = a;
  CheckResult out;
  for (const RequestRecord& r : records) {
    if (!r.result.ok()) continue;
    auto it = agent_index.find(r.agent);
    const model::Generation* ref = nullptr;
    if (it != agent_index.end() && it->second < refs.size() && r.turn < refs[it->second].size()) {
      ref = &refs[it->second][r.turn];
    }
    ++out.checked;
    if (ref == nullptr) {
      ++out.unknown;
      ++out.mismatches;
      out.mismatched_ids.push_back(r.request_id);
      continue;
    }
    const bool same = r.result.first_logits_digest() == ref->first_logits_digest &&
                      std::equal(r.result.generated().begin(), r.result.generated().end(),
                                 ref->tokens.begin(), ref->tokens.end());
    if (!same) {
      ++out.mismatches;
      out.mismatched_ids.push_back(r.request_id);
    }
  }
  return out;
}

}  // namespace dualpath::replay
