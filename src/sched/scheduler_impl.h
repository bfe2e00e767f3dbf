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

#include "dualpath/sched/cluster.h"
#include "dualpath/sched/config.h"
#include "dualpath/sched/scheduler.h"
#include "dualpath/sched/types.h"

namespace dualpath::sched {

struct EngineState {
  int64_t requests = 0;
  int64_t tokens = 0;
  int64_t hbm_free = 0;  // decode engines only
  uint32_t node = 0;
  uint32_t group = 0;
  Role role = Role::kPrefill;
};

struct GroupState {
  Role role = Role::kPrefill;
  std::vector<uint32_t> engines;  // ascending engine ids; engines[0] is the leader
  // Σ engine tokens + tokens of the private queue (decode groups): phase 1's balance key.
  int64_t load_tokens = 0;
  std::deque<uint32_t> private_queue;  // request slots (decode groups)
  uint32_t rr_cursor = 0;              // round-robin engine policy
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
  std::vector<uint32_t> decode_groups_;  // ids of decode groups, ascending
  std::vector<int64_t> node_read_queue_;
  // Live queue source of the prefill fetch in progress (nullptr otherwise), and per node the
  // fetch (fetch_epoch_) whose value node_read_queue_ holds: a node is read once per fetch.
  const NodeReadQueueSource* live_queues_ = nullptr;
  std::vector<uint64_t> node_epoch_;
  uint64_t fetch_epoch_ = 0;
  std::vector<RequestSlot> slots_;
  std::vector<uint32_t> free_slots_;
  std::deque<uint32_t> global_queue_;
  std::deque<uint32_t> prefill_queue_;
  uint64_t rr_read_counter_ = 0;
  uint32_t rr_decode_group_cursor_ = 0;
  SchedStats stats_;
};

}  // namespace dualpath::sched
