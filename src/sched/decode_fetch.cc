// DE scheduling, DualPath §6.1 "DE Scheduling Phase 1 / Phase 2".
#include <algorithm>

#include "sched/gallop.h"
#include "sched/scheduler_impl.h"

namespace dualpath::sched {

// Phase 1 (across groups): every request of the global queue goes to the decode group with the
// fewest total tokens (its engines' unfinished tokens plus what already waits in its private
// queue); ties go to the lower group id. Counting the private queue is what spreads one drain
// over several groups instead of piling it onto the group that was lightest before the drain.
// The least-loaded group is decode_load_'s minimum (a tournament tree over the groups' loads,
// min_index.h): the same group a scan keeping the first minimum finds.
void SchedulerImpl::DrainGlobalQueue() {
  const size_t n = decode_groups_.size();
  while (!global_queue_.empty()) {
    const uint32_t slot = global_queue_.front();
    global_queue_.pop_front();
    uint32_t best;
    if (config_.engine_policy == EnginePolicy::kRoundRobin) {
      best = decode_groups_[rr_decode_group_cursor_];
      rr_decode_group_cursor_ = static_cast<uint32_t>((rr_decode_group_cursor_ + 1) % n);
    } else {
      best = decode_groups_[decode_load_.Min()];
    }
    const SchedRequest& request = slots_[slot].request;
    const int64_t need = request.decode_tokens();
    GroupState& g = groups_[best];
    const int64_t before =
        g.private_queue.empty() ? g.popped_need : g.private_queue.back().need_through;
    g.private_queue.push_back(PrivateEntry{slot, before + need, request.id});
    AddLoad(best, need);
  }
}

// Phase 2 (within the fetching group). S = the longest prefix of the private queue whose HBM
// needs fit in the group's total free HBM (no fragmentation assumed): an upper bound on what this
// fetch can place. The high-token threshold is the mean tokens per DE once S is placed. Then the
// head is popped repeatedly: among DEs with enough free HBM, DEs at or below the threshold are
// preferred and the one with the fewest unfinished requests wins (ties: fewer tokens, lower id);
// if all candidates are high-token DEs, the one with the fewest tokens wins (ties: fewer
// requests, lower id). The fetch ends when no DE can hold the head request.
void SchedulerImpl::AssignDecodeEngines(uint32_t group, FetchResult* out) {
  GroupState& g = groups_[group];
  if (g.private_queue.empty()) return;

  int64_t hbm_total = 0;
  int64_t engine_tokens = 0;
  int64_t hbm_most = 0;
  for (uint32_t e : g.engines) {
    hbm_total += engines_[e].hbm_free;
    engine_tokens += engines_[e].tokens;
    hbm_most = std::max(hbm_most, engines_[e].hbm_free);
  }
  // No DE can hold the head: the loop below would end at once (what most fetches of a group
  // waiting for HBM do); S and the threshold are not needed for that.
  if (hbm_most < g.private_queue.front().need_through - g.popped_need) {
    ++stats_.de_fetch_no_hbm;
    return;
  }
  // S: the entries whose running total stays within hbm_total, i.e. the walk "add the next need
  // while the sum stays <= hbm_total" (the totals are nondecreasing: an upper bound, searched
  // from where the group's last fetch found it, gallop.h).
  const std::deque<PrivateEntry>& queue = g.private_queue;
  const size_t hint = g.s_boundary_hint > g.popped_entries
                          ? static_cast<size_t>(g.s_boundary_hint - g.popped_entries)
                          : 0;
  const size_t first_over = GallopUpperBound(queue.size(), hint, g.popped_need + hbm_total,
                                             [&queue](size_t i) { return queue[i].need_through; });
  g.s_boundary_hint = g.popped_entries + first_over;
  const int64_t s_tokens = first_over == 0 ? 0 : queue[first_over - 1].need_through - g.popped_need;
  const int64_t n_engines = static_cast<int64_t>(g.engines.size());
  const int64_t high_threshold = (engine_tokens + s_tokens) / n_engines;

  while (!g.private_queue.empty()) {
    const uint32_t slot = g.private_queue.front().slot;
    const RequestId id = g.private_queue.front().id;
    // The head's decode tokens, without touching its slot (placed or not, most fetches stop here).
    const int64_t need = g.private_queue.front().need_through - g.popped_need;
    int best = -1;
    if (config_.engine_policy == EnginePolicy::kRoundRobin) {
      const size_t n = g.engines.size();
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (g.rr_cursor + k) % n;
        if (engines_[g.engines[i]].hbm_free >= need) {
          best = static_cast<int>(g.engines[i]);
          g.rr_cursor = static_cast<uint32_t>((i + 1) % n);
          break;
        }
      }
      if (best >= 0) ++stats_.de_normal;
    } else {
      int best_rest = -1;
      int best_high = -1;
      for (uint32_t id : g.engines) {
        const EngineState& e = engines_[id];
        if (e.hbm_free < need) continue;
        if (e.tokens > high_threshold) {
          if (best_high < 0) {
            best_high = static_cast<int>(id);
            continue;
          }
          const EngineState& b = engines_[best_high];
          if (e.tokens < b.tokens || (e.tokens == b.tokens && e.requests < b.requests)) {
            best_high = static_cast<int>(id);
          }
        } else {
          if (best_rest < 0) {
            best_rest = static_cast<int>(id);
            continue;
          }
          const EngineState& b = engines_[best_rest];
          if (e.requests < b.requests || (e.requests == b.requests && e.tokens < b.tokens)) {
            best_rest = static_cast<int>(id);
          }
        }
      }
      if (best_rest >= 0) {
        best = best_rest;
        ++stats_.de_normal;
      } else if (best_high >= 0) {
        best = best_high;
        ++stats_.de_high_token;
      }
    }
    if (best < 0) {
      ++stats_.de_fetch_no_hbm;
      return;
    }
    g.popped_need = g.private_queue.front().need_through;
    g.private_queue.pop_front();
    ++g.popped_entries;
    EngineState& e = engines_[static_cast<uint32_t>(best)];
    e.requests += 1;
    e.tokens += need;
    e.hbm_free -= need;
    // g.load_tokens is unchanged: the tokens move from the private queue to an engine.
    slots_[slot].decode_engine = static_cast<uint32_t>(best);
    prefill_queue_.push_back(slot);
    out->decode.push_back(DecodeAssignment{id, EngineId(static_cast<uint32_t>(best)), need});
    ++stats_.decode_assigned;
  }
}

}  // namespace dualpath::sched
