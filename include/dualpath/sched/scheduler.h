// The inter-engine scheduler of DualPath §6.1: assigns each request a decode engine (DE), a
// prefill engine (PE) and a read side. Pure logic: events in (Submit, reports), decisions out
// (FetchForGroup); it never reads a clock and never does I/O, so the simulator and the gRPC
// scheduler service run the same code.
//
// Request flow (see docs/sched.md "How the simulator drives this"):
//   Submit(req)                  -> global waiting queue
//   FetchForGroup(decode group)  -> phase 1: drains the global queue into the decode groups'
//                                   private queues (each request to the group with the fewest
//                                   total tokens); phase 2: assigns DEs of *this* group from its
//                                   private queue while HBM allows. Returns DecodeAssignments; the
//                                   assigned requests join the prefill waiting queue (FIFO).
//   FetchForGroup(prefill group) -> FIFO over the prefill waiting queue: picks a PE of this group
//   by
//                                   category (short read queue first, then long; overloaded
//                                   never) and minimum unfinished tokens, then the read side.
//                                   Returns complete Assignments (PE, DE, side, tokens per side).
//                                   A request with a fixed prefill engine (routing.h,
//                                   SchedRequest::prefill_engine) goes only to that engine, when
//                                   it is not overloaded; requests behind it may go first.
// The DE is chosen before the PE because the DE read path needs the DE known before the read
// starts, and the read side compares the PE's and the DE's node queues (§6.1: "after selecting PE
// and DE for a request, we choose to read on the side with the shorter reading queue").
//
// State: the scheduler keeps a view of every engine (unfinished requests/tokens, HBM free) and of
// every node's read queue. A report overwrites the view of its engine; every assignment adds to
// it (so later decisions in the same fetch, and fetches of other groups before their next report,
// see it). Engines are expected to report on every fetch of their group; the simulator may also
// call ApplyReports at any time (e.g. when a request completes).
//
// Allocation: steady-state decisions do not allocate (queues reuse their storage; FetchResult
// keeps its capacity).
//
// Thread safety: none; one thread drives a Scheduler (the simulator's event loop, or the
// service's scheduling thread behind a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "dualpath/common/status.h"
#include "dualpath/sched/cluster.h"
#include "dualpath/sched/config.h"
#include "dualpath/sched/types.h"

namespace dualpath::sched {

class SchedulerImpl;

// A live view of nodes' disk read queues that a prefill fetch reads only for the nodes it needs
// (FetchForGroup below). For a caller that can tell any node's queue at any time (the simulator),
// this replaces ApplyNodeReadQueue of every decode node before each prefill fetch: the same
// decisions, without a write per node per fetch (a 1,000-node cluster fetches thousands of times
// per simulated second).
class NodeReadQueueSource {
 public:
  virtual ~NodeReadQueueSource() = default;
  // The node's disk read queue now, in tokens; >= 0 (a negative value is a caller bug: checked).
  virtual int64_t ReadQueueTokens(NodeId node) const = 0;
};

class Scheduler {
 public:
  // Validates both; errors are kSchedBadConfig naming the field or engine.
  static Result<std::unique_ptr<Scheduler>> Create(const ClusterDesc& cluster,
                                                   const SchedConfig& config);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Enqueues a request in the global waiting queue. kInvalidArgument for a malformed request
  // (see SchedRequest::Validate) or a prefill_engine that is not a prefill engine. Request ids are
  // the caller's; they need not be unique to the scheduler but the caller uses them to match
  // assignments.
  Status Submit(const SchedRequest& request);

  // Overwrites the scheduler's view of the reporting engines. kInvalidArgument for an unknown
  // engine id or a negative field; on error no report of the batch is applied.
  Status ApplyReports(std::span<const EngineReport> reports);

  // Overwrites the view of one node's disk read queue (tokens), without a full engine report.
  // The read-side choice compares the PE's and the DE's node queues, and a decode node's queue
  // otherwise refreshes only when its group fetches; a simulator (or a service receiving
  // storage-NIC telemetry) can keep every node's queue current with this. kInvalidArgument for
  // an unknown node or a negative value.
  Status ApplyNodeReadQueue(NodeId node, int64_t read_queue_tokens);

  // A group's leader fetches work for its group. `reports` are the group's engines' reports
  // (applied first, as by ApplyReports; may be empty, or include other engines). Appends the
  // decisions to `out` (out->decode for a decode group, out->prefill for a prefill group); does
  // not clear it. kInvalidArgument for an unknown group or bad report.
  Status FetchForGroup(GroupId group, std::span<const EngineReport> reports, FetchResult* out);
  // The same, and for a prefill group the DE node queue of each request the fetch places is read
  // from `live_queues` the first time the fetch needs that node (nodes of `reports` excepted:
  // their reports carry them). Decisions are exactly those of ApplyNodeReadQueue(n,
  // live_queues->ReadQueueTokens(n)) for every such node before the plain FetchForGroup; nodes
  // the fetch never looks at keep their older view (View/NodeReadQueue show it). nullptr = the
  // plain call.
  Status FetchForGroup(GroupId group, std::span<const EngineReport> reports, FetchResult* out,
                       const NodeReadQueueSource* live_queues);

  // Queue lengths (requests), for the simulator's stop conditions and tests.
  int64_t global_queue_size() const;
  int64_t private_queue_size(GroupId decode_group) const;  // 0 for a prefill group
  int64_t prefill_queue_size() const;
  // The same as size() == 0, without counting (the simulator asks on every fetch tick).
  bool global_queue_empty() const;
  bool private_queue_empty(GroupId decode_group) const;  // true for a prefill group
  bool prefill_queue_empty() const;
  // Requests submitted and not yet returned in a prefill Assignment.
  int64_t pending() const;

  // The scheduler's current view (reports + its own assignments since), for tests and tracing.
  EngineReport View(EngineId engine) const;
  int64_t NodeReadQueue(NodeId node) const;

  const SchedStats& stats() const;
  const SchedConfig& config() const;
  const ClusterDesc& cluster() const;
  GroupId group_of(EngineId engine) const;
  // The leader of a group: its lowest engine id (the paper's rank 0).
  EngineId leader(GroupId group) const;
  Role group_role(GroupId group) const;

 private:
  explicit Scheduler(std::unique_ptr<SchedulerImpl> impl);
  std::unique_ptr<SchedulerImpl> impl_;
};

}  // namespace dualpath::sched
