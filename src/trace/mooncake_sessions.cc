// InferMooncakeSessions: conversations from Mooncake's prefix-chained hash ids (see workload.h).
#include <algorithm>
#include <string>
#include <unordered_map>

#include "dualpath/trace/workload.h"

namespace dualpath::trace {

Result<Workload> InferMooncakeSessions(const Workload& requests) {
  Workload out;
  out.name = requests.name + "+sessions";
  // Last full block id of each open conversation's latest prompt → index in out.sessions. A
  // conversation leaves the map when a request continues it and re-enters under its new key.
  std::unordered_map<uint64_t, size_t> open;
  // The latest request of each conversation, for the next turn's append.
  struct Last {
    uint64_t in;
    uint64_t out;
  };
  std::vector<Last> last;
  for (const Session& r : requests.sessions) {
    if (r.turns.size() != 1 || r.turns[0].hash_ids.empty() || r.turns[0].arrival_s < 0 ||
        r.block_size == 0 || r.turns[0].keep_tokens != kKeepAll) {
      return InvalidArgument("session " + std::to_string(r.id) +
                             " is not a one-turn Mooncake request with hash ids and arrival");
    }
    const Turn& req = r.turns[0];
    const std::vector<uint64_t>& h = req.hash_ids;
    const uint64_t in = req.append_tokens;
    // Longest prefix of h that ends at an open conversation's key.
    size_t conv = out.sessions.size();
    for (size_t j = h.size(); j >= kMinChainBlocks; --j) {
      auto it = open.find(h[j - 1]);
      if (it != open.end()) {
        conv = it->second;
        open.erase(it);
        break;
      }
    }
    Turn turn = req;
    if (conv == out.sessions.size()) {
      Session s;
      s.id = conv;
      s.start_s = req.arrival_s;
      s.block_size = r.block_size;
      out.sessions.push_back(std::move(s));
      last.push_back({0, 0});
    } else {
      const Last& prev = last[conv];
      if (in >= prev.in + prev.out) {
        turn.append_tokens = in - prev.in - prev.out;  // Appendix A.3: the whole context carries on
      } else {
        // The prompt did not carry the whole previous output: keep what the hash ids prove.
        turn.keep_tokens = std::min(prev.in / r.block_size * r.block_size, in);
        turn.append_tokens = in - turn.keep_tokens;
      }
    }
    out.sessions[conv].turns.push_back(std::move(turn));
    last[conv] = {in, req.gen_tokens};
    const uint64_t full = in / r.block_size;
    if (full >= kMinChainBlocks && full <= h.size()) {
      open[h[full - 1]] = conv;
    }
  }
  return out;
}

}  // namespace dualpath::trace
