// Scheduler's state and algorithms (private to sched). The public facade is
// include/dualpath/sched/scheduler.h; the two fetch paths live in decode_fetch.cc and
// prefill_fetch.cc.
//
// All per-engine, per-node and per-group state is in flat vectors indexed by the dense ids, and
// requests live in a slot table recycled through a free list, so a decision touches a handful of
// cache lines and allocates nothing in steady state.
//
// Thread safety: none (see scheduler.h).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "dualpath/common/huge_pages.h"
#include "dualpath/sched/cluster.h"
#include "dualpath/sched/config.h"
#include "dualpath/sched/scheduler.h"
#include "dualpath/sched/types.h"
#include "sched/min_index.h"

namespace dualpath::sched {

struct EngineState {
  int64_t requests = 0;
  int64_t tokens = 0;
  int64_t hbm_free = 0;  // decode engines only
  uint32_t node = 0;
  uint32_t group = 0;
  Role role = Role::kPrefill;
};

// A request waiting in a decode group's private queue, with the running total of the HBM needs
// (decode tokens) pushed to that queue so far, its own included. Phase 2's prefix S is then a
// binary search over `need_through` instead of a walk that touched every waiting request's slot
// (a cache miss each; at 48P96D the walk was most of phase 2, issue 27). The totals grow
// monotonically (needs are >= 0), so the search finds the same prefix the walk did. The request's
// id rides along too: phase 2 then only writes the placed request's slot (its decode engine), and
// a store to a line last touched at submission does not stall the fetch as its load did (issue 27).
struct PrivateEntry {
  uint32_t slot;
  int64_t need_through;
  RequestId id;
};

struct GroupState {
  Role role = Role::kPrefill;
  std::vector<uint32_t> engines;           // ascending engine ids; engines[0] is the leader
  std::deque<PrivateEntry> private_queue;  // decode groups, FIFO
  // need_through of the last entry popped from private_queue (0 before the first): the needs of
  // entries [0, k] total private_queue[k].need_through - popped_need.
  int64_t popped_need = 0;
  // Entries ever popped from private_queue, and phase 2's last S boundary as an entry number in
  // the same count (popped + index): the next fetch's search starts there (gallop.h).
  uint64_t popped_entries = 0;
  uint64_t s_boundary_hint = 0;
  uint32_t rr_cursor = 0;  // round-robin engine policy
};

struct RequestSlot {
  SchedRequest request;
  uint32_t decode_engine = 0;
};

class SchedulerImpl {
 public:
  SchedulerImpl(const ClusterDesc& cluster, const SchedConfig& config);

  Status Submit(const SchedRequest& request);
  Status ApplyReports(std::span<const EngineReport> reports);
  Status ApplyNodeReadQueue(NodeId node, int64_t read_queue_tokens);
  Status FetchForGroup(GroupId group, std::span<const EngineReport> reports, FetchResult* out,
                       const NodeReadQueueSource* live_queues);

  // decode_fetch.cc
  void DrainGlobalQueue();                                     // phase 1
  void AssignDecodeEngines(uint32_t group, FetchResult* out);  // phase 2
  // prefill_fetch.cc
  void AssignPrefillEngines(uint32_t group, FetchResult* out);
  // The §6.1 PE of group `g` for the next request (advances g's round-robin cursor under that
  // policy); -1 when every engine of the group is overloaded. *category: the PE's category.
  int ChoosePrefillEngine(GroupState& g, int* category);
  bool AllOverloaded(const GroupState& g) const;
  // Under a live queue source (FetchForGroup), reads `node`'s queue from it once per fetch.
  void RefreshNodeQueue(uint32_t node);

  uint32_t AllocSlot(const SchedRequest& request);
  void FreeSlot(uint32_t slot);

  ClusterDesc cluster_;
  SchedConfig config_;
  std::vector<EngineState> engines_;
  std::vector<GroupState> groups_;
  // Group `group`'s load_tokens_ changes by `delta`; a decode group's entry in decode_load_ too.
  // Every change of load_tokens_ goes through here, so the two never disagree.
  void AddLoad(uint32_t group, int64_t delta) {
    if (delta == 0) return;  // most reports repeat the load the scheduler holds
    load_tokens_[group] += delta;
    const int32_t rank = decode_rank_[group];
    if (rank >= 0) decode_load_.Set(static_cast<size_t>(rank), load_tokens_[group]);
  }

  // By group id: Σ engine tokens + tokens of the private queue (decode groups), phase 1's balance
  // key (AddLoad).
  std::vector<int64_t> load_tokens_;
  std::vector<uint32_t> decode_groups_;  // ids of decode groups, ascending
  // By group id: the group's index in decode_groups_, or -1 for a prefill group.
  std::vector<int32_t> decode_rank_;
  // Phase 1's choice, the decode group with the least load_tokens_ (ties: the lower id), kept
  // current by AddLoad instead of scanning every decode group for every request (issue 27).
  // Entry i is decode_groups_[i]; ids ascend, so "lower index" is "lower group id".
  MinIndex decode_load_;
  std::vector<int64_t> node_read_queue_;
  // Live queue source of the prefill fetch in progress (nullptr otherwise), and per node the
  // fetch (fetch_epoch_) whose value node_read_queue_ holds: a node is read once per fetch.
  const NodeReadQueueSource* live_queues_ = nullptr;
  std::vector<uint64_t> node_epoch_;
  uint64_t fetch_epoch_ = 0;
  // By slot; in huge pages (common/huge_pages.h): a fetch reads slots at unrelated places, and a
  // large cluster's table spans more 4 KiB pages than a TLB holds.
  HugePageVector<RequestSlot> slots_;
  std::vector<uint32_t> free_slots_;
  std::deque<uint32_t> global_queue_;
  std::deque<uint32_t> prefill_queue_;
  uint64_t rr_read_counter_ = 0;
  uint32_t rr_decode_group_cursor_ = 0;
  SchedStats stats_;
};

}  // namespace dualpath::sched
