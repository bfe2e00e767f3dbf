// PE scheduling and read-side choice, DualPath §6.1 "PE Scheduling" and "KV-Cache Read Task
// Scheduling".
#include "dualpath/common/check.h"
#include "sched/read_side.h"
#include "sched/scheduler_impl.h"

namespace dualpath::sched {
namespace {

// Category of a PE (§6.1): 1 overloaded (tokens > β), 2 short read queue (queue <= α),
// 3 long read queue.
int Category(const EngineState& e, int64_t node_queue, const SchedConfig& c) {
  if (e.tokens > c.unfinished_token_limit) return 1;
  return node_queue <= c.short_read_queue_tokens ? 2 : 3;
}

}  // namespace

// The §6.1 choice among `g`'s engines: the category-2 PE with the fewest unfinished tokens, else
// the category-3 PE with the fewest (ties: fewer unfinished requests, then the lower engine id);
// or cyclic under the round-robin engine policy. -1 when every engine of the group is overloaded.
int SchedulerImpl::ChoosePrefillEngine(GroupState& g, int* category) {
  int best = -1;
  int best_cat = 0;
  if (config_.engine_policy == EnginePolicy::kRoundRobin) {
    const size_t n = g.engines.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (g.rr_cursor + k) % n;
      const EngineState& e = engines_[g.engines[i]];
      const int cat = Category(e, node_read_queue_[e.node], config_);
      if (cat == 1) continue;
      best = static_cast<int>(g.engines[i]);
      best_cat = cat;
      g.rr_cursor = static_cast<uint32_t>((i + 1) % n);
      break;
    }
  } else {
    for (uint32_t id : g.engines) {
      const EngineState& e = engines_[id];
      const int cat = Category(e, node_read_queue_[e.node], config_);
      if (cat == 1) continue;
      if (best >= 0) {
        const EngineState& b = engines_[best];
        const bool better =
            cat < best_cat ||
            (cat == best_cat &&
             (e.tokens < b.tokens || (e.tokens == b.tokens && e.requests < b.requests)));
        if (!better) continue;
      }
      best = static_cast<int>(id);
      best_cat = cat;
    }
  }
  *category = best_cat;
  return best;
}

void SchedulerImpl::RefreshNodeQueue(uint32_t node) {
  if (live_queues_ == nullptr || node_epoch_[node] == fetch_epoch_) return;
  const int64_t q = live_queues_->ReadQueueTokens(NodeId(node));
  DUALPATH_CHECK(q >= 0, "NodeReadQueueSource returned a negative read queue");
  node_read_queue_[node] = q;
  node_epoch_[node] = fetch_epoch_;
}

bool SchedulerImpl::AllOverloaded(const GroupState& g) const {
  for (uint32_t id : g.engines) {
    const EngineState& e = engines_[id];
    if (Category(e, node_read_queue_[e.node], config_) != 1) return false;
  }
  return true;
}

// FIFO over the prefill waiting queue. Each request goes to ChoosePrefillEngine's PE; overloaded
// PEs get nothing. The chosen PE's tokens (and the chosen read side's node queue) are updated
// before the next request, so one fetch spreads its requests. The fetch ends when every PE of the
// group is overloaded or the queue is empty.
//
// A request with a fixed prefill engine (routing, SchedRequest::prefill_engine) is taken only by
// that engine's group, and only while the engine is not overloaded; otherwise it stays in the
// queue and the requests behind it are considered (FIFO among those this group may take). Without
// fixed engines the loop only ever looks at the queue's head, exactly the paper's FIFO.
void SchedulerImpl::AssignPrefillEngines(uint32_t group, FetchResult* out) {
  GroupState& g = groups_[group];
  size_t pos = 0;  // the first queue entry this fetch has not skipped
  while (pos < prefill_queue_.size()) {
    const uint32_t slot = prefill_queue_[pos];
    const SchedRequest& queued = slots_[slot].request;
    int best = -1;
    int best_cat = 0;
    if (queued.prefill_engine.has_value()) {
      const uint32_t pin = queued.prefill_engine->value();
      const EngineState& e = engines_[pin];
      if (e.group != group) {
        ++pos;  // another group's engine takes it
        continue;
      }
      const int cat = Category(e, node_read_queue_[e.node], config_);
      if (cat == 1) {
        if (AllOverloaded(g)) {
          ++stats_.pe_fetch_all_overloaded;
          return;
        }
        ++pos;  // waits for its engine; others of the group may take later requests
        continue;
      }
      best = static_cast<int>(pin);
      best_cat = cat;
    } else {
      best = ChoosePrefillEngine(g, &best_cat);
      if (best < 0) {
        ++stats_.pe_fetch_all_overloaded;
        return;
      }
    }
    (best_cat == 2 ? stats_.pe_short_queue : stats_.pe_long_queue) += 1;

    if (pos == 0) {
      prefill_queue_.pop_front();
    } else {
      prefill_queue_.erase(prefill_queue_.begin() + static_cast<std::ptrdiff_t>(pos));
    }
    const RequestSlot& rs = slots_[slot];
    const SchedRequest& req = rs.request;
    EngineState& pe = engines_[static_cast<uint32_t>(best)];
    const EngineState& de = engines_[rs.decode_engine];
    RefreshNodeQueue(de.node);  // the first read of this node in a live-queue fetch

    const ReadChoice rc = ChooseReadSide(config_, req.hit_tokens, node_read_queue_[pe.node],
                                         node_read_queue_[de.node], &rr_read_counter_);
    node_read_queue_[pe.node] += rc.prefill_tokens;
    node_read_queue_[de.node] += rc.decode_tokens;
    pe.requests += 1;
    pe.tokens += req.prompt_tokens;
    AddLoad(group, req.prompt_tokens);

    Assignment a;
    a.request = req.id;
    a.session = req.session;
    a.prefill = EngineId(static_cast<uint32_t>(best));
    a.decode = EngineId(rs.decode_engine);
    a.side = rc.side;
    a.prefill_read_tokens = rc.prefill_tokens;
    a.decode_read_tokens = rc.decode_tokens;
    a.prompt_tokens = req.prompt_tokens;
    a.hit_tokens = req.hit_tokens;
    a.expected_gen_tokens = req.expected_gen_tokens;
    out->prefill.push_back(a);

    ++stats_.prefill_assigned;
    if (req.hit_tokens > 0) {
      switch (rc.side) {
        case ReadSide::kPrefill:
          ++stats_.read_prefill;
          break;
        case ReadSide::kDecode:
          ++stats_.read_decode;
          break;
        case ReadSide::kSplit:
          ++stats_.read_split;
          break;
      }
    }
    stats_.read_tokens_prefill += rc.prefill_tokens;
    stats_.read_tokens_decode += rc.decode_tokens;
    FreeSlot(slot);
  }
}

}  // namespace dualpath::sched
