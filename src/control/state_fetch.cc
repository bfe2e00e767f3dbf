// ControlState::Fetch: the long poll of engine group leaders (§6.1), and the decode/prefill
// scheduling passes it drives.
#include <fmt/format.h>

#include <chrono>
#include <utility>

#include "control/state.h"
#include "dualpath/common/check.h"
#include "dualpath/common/log.h"

namespace dualpath::control {
namespace {

// The largest probe age a report may carry: 31 years in milliseconds, so that its nanoseconds
// (x 10^6) and the clock arithmetic on them stay far inside int64.
constexpr int64_t kMaxReachAgeMs = 1'000'000'000'000;

v1::ReadSide ToProtoSide(sched::ReadSide side) {
  switch (side) {
    case sched::ReadSide::kPrefill:
      return v1::READ_SIDE_PREFILL;
    case sched::ReadSide::kDecode:
      return v1::READ_SIDE_DECODE;
    case sched::ReadSide::kSplit:
      return v1::READ_SIDE_SPLIT;
  }
  return v1::READ_SIDE_UNSPECIFIED;
}

}  // namespace

Status ControlState::ApplyReportsLocked(
    const google::protobuf::RepeatedPtrField<v1::EngineReport>& reports, const char* rpc) {
  // Validate the whole batch first: a bad report changes nothing.
  for (const v1::EngineReport& r : reports) {
    if (r.engine_id() >= engines_.size() || !engines_[r.engine_id()].registered) {
      return InvalidArgument(
          fmt::format("{}: report for unknown engine_id {}", rpc, r.engine_id()));
    }
    if (r.unfinished_requests() < 0 || r.unfinished_tokens() < 0 || r.read_queue_tokens() < 0 ||
        r.hbm_free_tokens() < 0 || r.capacity_tokens() < 0) {
      return InvalidArgument(
          fmt::format("{}: report of engine {} has a negative field", rpc, r.engine_id()));
    }
    for (const v1::PeerReach& p : r.reach()) {
      // Ages in [-1, kMaxReachAgeMs] ms: the service clock's arithmetic on them cannot overflow.
      if (p.ok_age_ms() < -1 || p.ok_age_ms() > kMaxReachAgeMs || p.probing_ms() < 0 ||
          p.probing_ms() > kMaxReachAgeMs) {
        return InvalidArgument(fmt::format(
            "fetch: report of engine {}: reach of engine {} has ok_age_ms {} (in [-1, {}]) and "
            "probing_ms {} (in [0, {}])",
            r.engine_id(), p.engine_id(), p.ok_age_ms(), kMaxReachAgeMs, p.probing_ms(),
            kMaxReachAgeMs));
      }
    }
  }
  const Nanos now = clock_->Now();
  std::vector<sched::EngineReport> mapped;
  bool capacity_changed = false;
  for (const v1::EngineReport& r : reports) {
    EngineState& e = engines_[r.engine_id()];
    if (r.capacity_tokens() != e.capacity_tokens) {
      e.capacity_tokens = r.capacity_tokens();
      capacity_changed = true;
    }
    e.last_report.unfinished_requests = r.unfinished_requests();
    e.last_report.unfinished_tokens = r.unfinished_tokens();
    e.last_report.read_queue_tokens = r.read_queue_tokens();
    e.last_report.hbm_free_tokens = r.hbm_free_tokens();
    for (const v1::PeerReach& p : r.reach()) {
      // A peer the service no longer knows (an engine of a previous service incarnation, whose
      // peer list is not updated yet) is ignored; the next reply carries the list.
      if (p.engine_id() >= engines_.size() || !engines_[p.engine_id()].registered) continue;
      reach_.Record(r.engine_id(), p.engine_id(),
                    p.ok_age_ms() < 0 ? -1 : p.ok_age_ms() * kNanosPerMilli,
                    p.probing_ms() * kNanosPerMilli, now);
    }
    const uint32_t sid =
        r.engine_id() < engine_to_sched_.size() ? engine_to_sched_[r.engine_id()] : kNone;
    if (sched_ == nullptr || sid == kNone) continue;  // stored; applied at the next rebuild
    sched::EngineReport s = e.last_report;
    s.engine = EngineId(sid);
    mapped.push_back(s);
  }
  if (!mapped.empty()) {
    Status st = sched_->ApplyReports(mapped);
    DUALPATH_CHECK(st.ok(), st.ToString());  // validated above
  }
  // A queued request that no live engine can ever hold would wait in sched forever (phase 2
  // waits for HBM): the rebuild's re-submission fails it with a result that says why.
  // Likewise a request fixed by the routing to an engine whose buffer turns out too small for it
  // would wait there forever: the rebuild re-submits it with the normal choice.
  if (capacity_changed && sched_ != nullptr &&
      (AnyQueuedUnplaceableLocked() || AnyQueuedMisroutedLocked())) {
    RebuildLocked();
  }
  return Status::Ok();
}

Status ControlState::Fetch(const v1::FetchRequest& request, v1::FetchReply* reply) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(request.wait_ms());
  std::unique_lock<std::mutex> lock(mu_);
  const uint32_t id = request.group_id();  // each engine is its own group
  if (id >= engines_.size() || !engines_[id].registered) {
    // kNotFound, not bad input: an engine of a service that restarted (its registration gone
    // with the old process) gets this and registers again.
    return NotFound(fmt::format("fetch: unknown group_id {} (register first)", id));
  }
  if (!engines_[id].alive) {
    // Its requests went elsewhere; letting it work again would duplicate them. It may register
    // again (a restart) to rejoin.
    return FailedPrecondition(fmt::format(
        "fetch: engine {} was declared dead (no fetch for 3 heartbeats); register again",
        engines_[id].info.name()));
  }
  if (options_.placement) {
    return FailedPrecondition(
        "fetch: this service places requests for instances that do not fetch (--placement)");
  }
  RETURN_IF_ERROR(ApplyReportsLocked(request.reports(), "fetch"));
  // While a Fetch of the engine is in progress the engine is alive, however long the poll.
  ++engines_[id].in_poll;
  engines_[id].last_seen = clock_->Now();
  struct PollGuard {
    ControlState* self;
    uint32_t id;
    ~PollGuard() {
      --self->engines_[id].in_poll;
      self->engines_[id].last_seen = self->clock_->Now();
    }
  } guard{this, id};
  // A new Fetch proves the engine alive: deferred retries stop waiting for it. (A poll already in
  // progress does not count: its caller may have died since it started.)
  engines_[id].ping = false;
  ReleaseDeferredLocked(id);
  CheckLivenessLocked();
  // The engines it probes over the compute network, when its list is out of date (after the
  // liveness check: an engine it just declared dead is not on it).
  if (request.peers_version() != peers_version_) AddPeersLocked(id, reply);
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    const EngineState& e = engines_[i];
    if (e.registered && e.alive && !e.reachable) reply->add_cut_off(i);
  }

  const bool prefill = engines_[id].info.role() == v1::ROLE_PREFILL;
  for (;;) {
    if (shutdown_ || stopping_) {
      engines_[id].saw_shutdown = true;
      reply->set_shutdown(true);
      cv_.notify_all();  // WaitFinished may be waiting for this engine
      return Status::Ok();
    }
    if (engines_[id].ping) {
      // A deferred retry waits for this engine to fetch again: end this poll so it does.
      engines_[id].ping = false;
      return Status::Ok();
    }
    if (sched_ != nullptr && engines_[id].alive) {
      RunDecodePhaseLocked();
      if (prefill) {
        RunPrefillFetchLocked(id, reply);
      } else {
        for (v1::Assignment& a : engines_[id].pending_decode) *reply->add_decode() = std::move(a);
        engines_[id].pending_decode.clear();
      }
      if (reply->prefill_size() > 0 || reply->decode_size() > 0) return Status::Ok();
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      // One last pass happens on the next Fetch; an empty reply is a normal outcome.
      return Status::Ok();
    }
  }
}

void ControlState::RunDecodePhaseLocked() {
  // The service runs every decode group's pass itself (on the engines' last reports plus its own
  // assignments since), so a prefill engine never waits for a decode engine's round trip before
  // it can get work; decode engines collect their decode assignments on their next Fetch.
  bool any = false;
  const int groups = sched_->cluster().num_groups();
  for (int gi = 0; gi < groups; ++gi) {
    const sched::GroupId g(static_cast<uint32_t>(gi));
    if (sched_->group_role(g) != sched::Role::kDecode) continue;
    if (sched_->global_queue_size() == 0 && sched_->private_queue_size(g) == 0) continue;
    scratch_.Clear();
    Status st = sched_->FetchForGroup(g, {}, &scratch_);
    DUALPATH_CHECK(st.ok(), st.ToString());
    // Placement mode: nobody fetches decode assignments; the prefill pass completes them.
    if (options_.placement) continue;
    for (const sched::DecodeAssignment& d : scratch_.decode) {
      const uint32_t de = sched_to_engine_[d.decode.value()];
      const RequestState& rs = requests_.at(d.request.value());
      v1::Assignment a;
      *a.mutable_request() = rs.spec;
      a.set_decode_engine(de);
      *a.mutable_decode() = engines_[de].info;
      a.set_hit_tokens(rs.hit_tokens);
      a.set_attempt(rs.attempt);
      engines_[de].pending_decode.push_back(std::move(a));
      any = true;
    }
  }
  if (any) cv_.notify_all();
}

void ControlState::RunPrefillFetchLocked(uint32_t engine, v1::FetchReply* reply) {
  const uint32_t sid = engine_to_sched_[engine];
  if (sid == kNone) return;
  scratch_.Clear();
  Status st = sched_->FetchForGroup(sched_->group_of(EngineId(sid)), {}, &scratch_);
  DUALPATH_CHECK(st.ok(), st.ToString());
  for (const sched::Assignment& s : scratch_.prefill) *reply->add_prefill() = AssignLocked(s);
}

void ControlState::RunPlacementLocked() {
  if (placement_group_ == kNone) return;
  scratch_.Clear();
  Status st = sched_->FetchForGroup(sched::GroupId(placement_group_), {}, &scratch_);
  DUALPATH_CHECK(st.ok(), st.ToString());
  for (const sched::Assignment& s : scratch_.prefill) {
    v1::Assignment a = AssignLocked(s);
    requests_.at(s.request.value()).placed = std::move(a);
  }
  if (!scratch_.prefill.empty()) cv_.notify_all();  // the Place calls waiting for these
}

v1::Assignment ControlState::AssignLocked(const sched::Assignment& s) {
  const uint64_t rid = s.request.value();
  RequestState& rs = requests_.at(rid);
  rs.phase = Phase::kAssigned;
  rs.prefill = sched_to_engine_[s.prefill.value()];
  rs.decode = sched_to_engine_[s.decode.value()];
  engines_[rs.prefill].in_flight.insert(rid);
  engines_[rs.decode].in_flight.insert(rid);
  ++stats_.assigned;
  if (rs.routed != kNone) {
    DUALPATH_CHECK(rs.routed == rs.prefill, "control: a routed request went to another engine");
    ++stats_.routed;
  } else if (options_.routing != sched::Routing::kDualPath) {
    ++stats_.route_fallbacks;
  }

  v1::Assignment a;
  *a.mutable_request() = rs.spec;
  a.set_prefill_engine(rs.prefill);
  a.set_decode_engine(rs.decode);
  *a.mutable_prefill() = engines_[rs.prefill].info;
  *a.mutable_decode() = engines_[rs.decode].info;
  a.set_hit_tokens(rs.hit_tokens);
  a.set_prompt_block_hashes(rs.prompt_block_hashes);
  a.set_attempt(rs.attempt);
  if (!sched::MovesKv(options_.system)) {
    // Oracle (sched/system.h): a timing bound that neither reads storage nor moves KV between
    // engines; the scheduler saw no hit, so it placed no read either.
    a.set_side(v1::READ_SIDE_NONE);
  } else {
    a.set_side(ToProtoSide(s.side));
    a.set_prefill_read_tokens(s.prefill_read_tokens);
    a.set_decode_read_tokens(s.decode_read_tokens);
  }
  log::Debug("control: request {} (agent {} turn {}) attempt {} -> PE {}{} DE {} side {} hit {}",
             rid, rs.spec.agent_id(), rs.spec.turn(), rs.attempt, engines_[rs.prefill].info.name(),
             rs.routed != kNone ? " (routed)" : "", engines_[rs.decode].info.name(),
             v1::ReadSide_Name(a.side()), rs.hit_tokens);
  return a;
}

}  // namespace dualpath::control
