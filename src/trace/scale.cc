// ScaleTurns: the append / generation length sweeps of DualPath §7 (Figure 9).
#include <algorithm>
#include <cmath>
#include <string>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {
namespace {

uint64_t Scaled(uint64_t tokens, double factor) {
  return std::max<uint64_t>(
      1, static_cast<uint64_t>(std::llround(static_cast<double>(tokens) * factor)));
}

}  // namespace

Result<Workload> ScaleTurns(const Workload& w, double append_factor, double gen_factor,
                            uint64_t max_len_tokens) {
  for (double f : {append_factor, gen_factor}) {
    if (!(f > 0 && f <= 1000)) {
      return InvalidArgument("scale factor " + std::to_string(f) + " outside (0, 1000]");
    }
  }
  if (max_len_tokens < 2) {
    return InvalidArgument("max_len_tokens must be at least 2");
  }
  Workload out;
  out.name = w.name + "-x" + std::to_string(append_factor).substr(0, 4) + "a-x" +
             std::to_string(gen_factor).substr(0, 4) + "g";
  out.sessions.reserve(w.sessions.size());
  for (const Session& s : w.sessions) {
    Session t = s;
    t.turns.clear();
    uint64_t context = 0;
    for (const Turn& turn : s.turns) {
      if (!turn.hash_ids.empty() || turn.keep_tokens != kKeepAll) {
        return InvalidArgument("session " + std::to_string(s.id) +
                               ": cannot scale a trace with hash ids or compactions");
      }
      Turn scaled = turn;
      scaled.append_tokens = Scaled(turn.append_tokens, append_factor);
      scaled.gen_tokens = Scaled(turn.gen_tokens, gen_factor);
      if (context + scaled.append_tokens + scaled.gen_tokens > max_len_tokens) {
        if (t.turns.empty()) {
          scaled.append_tokens = std::min(scaled.append_tokens, max_len_tokens - 1);
          scaled.gen_tokens = std::min(scaled.gen_tokens, max_len_tokens - scaled.append_tokens);
          t.turns.push_back(scaled);
        }
        break;
      }
      context += scaled.append_tokens + scaled.gen_tokens;
      t.turns.push_back(scaled);
    }
    out.sessions.push_back(std::move(t));
  }
  return out;
}

}  // namespace dualpath::trace
