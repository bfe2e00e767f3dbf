#include "dualpath/replay/checker.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <unordered_map>

#include "dualpath/model/reference_session.h"

namespace dualpath::replay {
namespace {

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
      // One session per agent: each turn reuses the KV of the previous turns' positions.
      model::ReferenceSession session(model);
      for (const TurnSpec& t : workload.agents[a].turns) {
        Result<model::Generation> g = session.Run(t.prompt, t.teacher, t.gen_tokens);
        // Inputs were validated above; a failure here is a bug, kept as an empty generation
        // (every engine result then mismatches, which the run reports).
        refs[a].push_back(g.ok() ? std::move(*g) : model::Generation{});
      }
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
