// Conversions into the simulator's compact forms: cluster shapes and workloads.
#include <algorithm>
#include <cctype>
#include <random>
#include <string>

#include "dualpath/sim/simulator.h"

namespace dualpath::sim {

Result<ClusterShape> ParseClusterShape(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("bad P/D shape '" + std::string(text) + "': " + why +
                           " (want e.g. 2P4D: prefill nodes, 'P', decode nodes, 'D')");
  };
  // <digits>P<digits>D, case-insensitive.
  size_t i = 0;
  auto number = [&](uint32_t* out) {
    size_t start = i;
    uint64_t v = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && i - start < 6) {
      v = v * 10 + static_cast<uint64_t>(text[i] - '0');
      ++i;
    }
    *out = static_cast<uint32_t>(v);
    return i > start;
  };
  ClusterShape shape;
  if (!number(&shape.prefill_nodes) || i >= text.size() ||
      std::toupper(static_cast<unsigned char>(text[i])) != 'P') {
    return bad("expected <n>P");
  }
  ++i;
  if (!number(&shape.decode_nodes) || i + 1 != text.size() ||
      std::toupper(static_cast<unsigned char>(text[i])) != 'D') {
    return bad("expected <n>D after P");
  }
  if (shape.prefill_nodes == 0 || shape.decode_nodes == 0) {
    return bad("needs at least one prefill and one decode node");
  }
  return shape;
}

std::string ClusterShapeName(ClusterShape shape) {
  return std::to_string(shape.prefill_nodes) + "P" + std::to_string(shape.decode_nodes) + "D";
}

Result<SimWorkload> CompactWorkload(const trace::Workload& w, uint32_t block_tokens) {
  if (w.sessions.empty()) {
    return InvalidArgument("workload '" + w.name + "' has no sessions");
  }
  SimWorkload out;
  out.agents.reserve(w.sessions.size());
  size_t total = 0;
  for (const trace::Session& s : w.sessions) {
    total += s.turns.size();
  }
  if (total >= UINT32_MAX) {
    return InvalidArgument("workload too large: more than 4G turns");
  }
  out.turns.reserve(total);
  for (const trace::Session& s : w.sessions) {
    if (s.turns.empty()) {
      continue;
    }
    SimAgent a;
    a.start_s = s.start_s;
    a.first_turn = static_cast<uint32_t>(out.turns.size());
    a.num_turns = static_cast<uint32_t>(s.turns.size());
    for (size_t i = 0; i < s.turns.size(); ++i) {
      const uint64_t prompt = trace::PromptTokens(s, i);
      uint64_t hit = trace::HitTokens(s, i, block_tokens);
      if (prompt == 0) {
        return InvalidArgument("session " + std::to_string(s.id) + " turn " + std::to_string(i) +
                               ": empty prompt");
      }
      if (prompt > UINT32_MAX || s.turns[i].gen_tokens > UINT32_MAX) {
        return InvalidArgument("session " + std::to_string(s.id) + " turn " + std::to_string(i) +
                               ": more than 4G tokens");
      }
      // Prefill must compute at least one token to produce the first output token: a fully
      // cached prompt recomputes its last block (what vLLM and SGLang do).
      if (hit >= prompt) {
        hit = (prompt - 1) / block_tokens * block_tokens;
      }
      SimTurn t;
      t.hit = static_cast<uint32_t>(hit);
      t.prompt = static_cast<uint32_t>(prompt);
      t.gen = static_cast<uint32_t>(std::max<uint64_t>(1, s.turns[i].gen_tokens));
      t.think_s = static_cast<float>(std::max(0.0, s.turns[i].think_time_s));
      t.arrival_s = s.turns[i].arrival_s;
      out.turns.push_back(t);
    }
    out.agents.push_back(a);
  }
  if (out.agents.empty()) {
    return InvalidArgument("workload '" + w.name + "' has no turns");
  }
  return out;
}

SimWorkload SampleAgents(const SimWorkload& base, uint64_t agents, uint64_t seed) {
  SimWorkload out;
  out.turns = base.turns;
  out.agents.reserve(agents);
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 17);
  for (uint64_t i = 0; i < agents; ++i) {
    // Multiply-shift instead of std::uniform_int_distribution, whose algorithm is not pinned by
    // the standard: the same seed must give the same workload everywhere.
    const uint64_t k =
        static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * base.agents.size()) >> 64);
    out.agents.push_back(base.agents[k]);
  }
  return out;
}

}  // namespace dualpath::sim
