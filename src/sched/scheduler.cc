#include "dualpath/sched/scheduler.h"

#include <fmt/format.h>

#include <utility>

#include "dualpath/common/check.h"
#include "sched/scheduler_impl.h"

namespace dualpath::sched {

SchedulerImpl::SchedulerImpl(const ClusterDesc& cluster, const SchedConfig& config)
    : cluster_(cluster), config_(config) {
  engines_.resize(cluster.engines.size());
  groups_.resize(static_cast<size_t>(cluster.num_groups()));
  load_tokens_.assign(groups_.size(), 0);
  node_read_queue_.assign(static_cast<size_t>(cluster.num_nodes()), 0);
  node_epoch_.assign(static_cast<size_t>(cluster.num_nodes()), 0);
  for (const EngineDesc& d : cluster.engines) {
    EngineState& e = engines_[d.id.value()];
    e.node = d.node.value();
    e.group = d.group.value();
    e.role = d.role;
    GroupState& g = groups_[d.group.value()];
    g.role = d.role;
    g.engines.push_back(d.id.value());  // engines are visited in id order: ascending
  }
  decode_rank_.assign(groups_.size(), -1);
  for (uint32_t i = 0; i < groups_.size(); ++i) {
    if (groups_[i].role == Role::kDecode) {
      decode_rank_[i] = static_cast<int32_t>(decode_groups_.size());
      decode_groups_.push_back(i);
    }
  }
  decode_load_.Reset(decode_groups_.size());  // every load 0, as load_tokens_
}

uint32_t SchedulerImpl::AllocSlot(const SchedRequest& request) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot].request = request;
  return slot;
}

void SchedulerImpl::FreeSlot(uint32_t slot) { free_slots_.push_back(slot); }

Status SchedulerImpl::Submit(const SchedRequest& request) {
  RETURN_IF_ERROR(request.Validate());
  if (request.prefill_engine.has_value()) {
    const uint32_t pin = request.prefill_engine->value();
    if (pin >= engines_.size() || engines_[pin].role != Role::kPrefill) {
      return InvalidArgument(fmt::format("request {}: prefill_engine {} is not a prefill engine",
                                         request.id.value(), pin));
    }
  }
  global_queue_.push_back(AllocSlot(request));
  ++stats_.submitted;
  return Status::Ok();
}

Status SchedulerImpl::ApplyReports(std::span<const EngineReport> reports) {
  // Validate the whole batch first so a bad report leaves the view untouched.
  for (const EngineReport& r : reports) {
    if (r.engine.value() >= engines_.size()) {
      return InvalidArgument(fmt::format("report: unknown engine {}", r.engine.value()));
    }
    if (r.unfinished_requests < 0 || r.unfinished_tokens < 0 || r.read_queue_tokens < 0 ||
        r.hbm_free_tokens < 0) {
      return InvalidArgument(fmt::format(
          "report: engine {} has a negative field (requests {}, tokens {}, read queue {}, hbm "
          "free {})",
          r.engine.value(), r.unfinished_requests, r.unfinished_tokens, r.read_queue_tokens,
          r.hbm_free_tokens));
    }
  }
  for (const EngineReport& r : reports) {
    EngineState& e = engines_[r.engine.value()];
    AddLoad(e.group, r.unfinished_tokens - e.tokens);
    e.requests = r.unfinished_requests;
    e.tokens = r.unfinished_tokens;
    if (e.role == Role::kDecode) e.hbm_free = r.hbm_free_tokens;
    node_read_queue_[e.node] = r.read_queue_tokens;
  }
  return Status::Ok();
}

Status SchedulerImpl::ApplyNodeReadQueue(NodeId node, int64_t read_queue_tokens) {
  if (node.value() >= node_read_queue_.size()) {
    return InvalidArgument(fmt::format("node read queue: unknown node {}", node.value()));
  }
  if (read_queue_tokens < 0) {
    return InvalidArgument(fmt::format("node read queue: node {} has negative queue {}",
                                       node.value(), read_queue_tokens));
  }
  node_read_queue_[node.value()] = read_queue_tokens;
  return Status::Ok();
}

Status SchedulerImpl::FetchForGroup(GroupId group, std::span<const EngineReport> reports,
                                    FetchResult* out, const NodeReadQueueSource* live_queues) {
  DUALPATH_CHECK(out != nullptr, "FetchForGroup: out is null");
  if (group.value() >= groups_.size()) {
    return InvalidArgument(fmt::format("fetch: unknown group {}", group.value()));
  }
  RETURN_IF_ERROR(ApplyReports(reports));
  if (groups_[group.value()].role == Role::kDecode) {
    DrainGlobalQueue();
    AssignDecodeEngines(group.value(), out);
  } else if (live_queues == nullptr) {
    AssignPrefillEngines(group.value(), out);
  } else {
    // A new fetch: every node is stale except those the reports just refreshed.
    ++fetch_epoch_;
    for (const EngineReport& r : reports)
      node_epoch_[engines_[r.engine.value()].node] = fetch_epoch_;
    live_queues_ = live_queues;
    AssignPrefillEngines(group.value(), out);
    live_queues_ = nullptr;
  }
  return Status::Ok();
}

// --- facade ---

Scheduler::Scheduler(std::unique_ptr<SchedulerImpl> impl) : impl_(std::move(impl)) {}
Scheduler::~Scheduler() = default;

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const ClusterDesc& cluster,
                                                     const SchedConfig& config) {
  RETURN_IF_ERROR(cluster.Validate());
  RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<Scheduler>(
      new Scheduler(std::make_unique<SchedulerImpl>(cluster, config)));
}

Status Scheduler::Submit(const SchedRequest& request) { return impl_->Submit(request); }

Status Scheduler::ApplyReports(std::span<const EngineReport> reports) {
  return impl_->ApplyReports(reports);
}

Status Scheduler::ApplyNodeReadQueue(NodeId node, int64_t read_queue_tokens) {
  return impl_->ApplyNodeReadQueue(node, read_queue_tokens);
}

Status Scheduler::FetchForGroup(GroupId group, std::span<const EngineReport> reports,
                                FetchResult* out) {
  return impl_->FetchForGroup(group, reports, out, nullptr);
}

Status Scheduler::FetchForGroup(GroupId group, std::span<const EngineReport> reports,
                                FetchResult* out, const NodeReadQueueSource* live_queues) {
  return impl_->FetchForGroup(group, reports, out, live_queues);
}

int64_t Scheduler::global_queue_size() const {
  return static_cast<int64_t>(impl_->global_queue_.size());
}

int64_t Scheduler::private_queue_size(GroupId decode_group) const {
  if (decode_group.value() >= impl_->groups_.size()) return 0;
  return static_cast<int64_t>(impl_->groups_[decode_group.value()].private_queue.size());
}

int64_t Scheduler::prefill_queue_size() const {
  return static_cast<int64_t>(impl_->prefill_queue_.size());
}

bool Scheduler::global_queue_empty() const { return impl_->global_queue_.empty(); }

bool Scheduler::private_queue_empty(GroupId decode_group) const {
  return decode_group.value() >= impl_->groups_.size() ||
         impl_->groups_[decode_group.value()].private_queue.empty();
}

bool Scheduler::prefill_queue_empty() const { return impl_->prefill_queue_.empty(); }

int64_t Scheduler::pending() const {
  return impl_->stats_.submitted - impl_->stats_.prefill_assigned;
}

EngineReport Scheduler::View(EngineId engine) const {
  EngineReport r;
  r.engine = engine;
  if (engine.value() >= impl_->engines_.size()) return r;
  const EngineState& e = impl_->engines_[engine.value()];
  r.unfinished_requests = e.requests;
  r.unfinished_tokens = e.tokens;
  r.read_queue_tokens = impl_->node_read_queue_[e.node];
  r.hbm_free_tokens = e.hbm_free;
  return r;
}

int64_t Scheduler::NodeReadQueue(NodeId node) const {
  if (node.value() >= impl_->node_read_queue_.size()) return 0;
  return impl_->node_read_queue_[node.value()];
}

const SchedStats& Scheduler::stats() const { return impl_->stats_; }
const SchedConfig& Scheduler::config() const { return impl_->config_; }
const ClusterDesc& Scheduler::cluster() const { return impl_->cluster_; }

GroupId Scheduler::group_of(EngineId engine) const {
  DUALPATH_CHECK(engine.value() < impl_->engines_.size(), "group_of: unknown engine");
  return GroupId(impl_->engines_[engine.value()].group);
}

EngineId Scheduler::leader(GroupId group) const {
  DUALPATH_CHECK(group.value() < impl_->groups_.size(), "leader: unknown group");
  return EngineId(impl_->groups_[group.value()].engines.front());
}

Role Scheduler::group_role(GroupId group) const {
  DUALPATH_CHECK(group.value() < impl_->groups_.size(), "group_role: unknown group");
  return impl_->groups_[group.value()].role;
}

}  // namespace dualpath::sched
