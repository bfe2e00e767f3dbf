// ControlState's placement mode (ServiceOptions::placement): Place and ReportEngines, for inference
// instances that do not fetch work (vLLM behind dualpath's proxy). The decisions are the same
// sched passes Fetch runs (§6.1: decode phases, then the prefill pass with its PE categories and
// read side); only who triggers them differs: a Place call instead of an engine's long poll.
#include <fmt/format.h>

#include <chrono>
#include <span>
#include <utility>

#include "control/state.h"
#include "dualpath/common/log.h"
#include "dualpath/control/client.h"

namespace dualpath::control {

Result<v1::Assignment> ControlState::Place(const v1::PlaceRequest& request) {
  if (!options_.placement) {
    return FailedPrecondition(
        "place: this service schedules engines that fetch; start it with --placement");
  }
  const v1::RequestSpec& spec = request.request();
  const uint64_t id = spec.request_id();
  // Placed requests are generated freely by the instance: no teacher.
  RETURN_IF_ERROR(
      ValidateRequest(spec, model_.vocab, /*teacher_forced=*/false).WithContext("place"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (requests_.count(id) != 0) {
      return InvalidArgument(fmt::format("place: request_id {} is already placed", id));
    }
    if (shutdown_ || stopping_) return FailedPrecondition("place: the run is shut down");
  }
  // The request's one hash pass and its hit probe, outside the lock (as Submit's).
  PromptProbe probe =
      probe_->Probe(std::span<const uint32_t>(spec.prompt().data(), spec.prompt_size()));

  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(request.wait_ms());
  std::unique_lock<std::mutex> lock(mu_);
  if (shutdown_ || stopping_) return FailedPrecondition("place: the run is shut down");
  RETURN_IF_ERROR(ApplyReportsLocked(request.reports(), "place"));
  const Nanos now = clock_->Now();
  for (const v1::EngineReport& r : request.reports()) {
    EngineState& e = engines_[r.engine_id()];
    if (e.alive) e.last_seen = now;  // a report is a heartbeat
  }
  auto [it, inserted] = requests_.try_emplace(id);
  if (!inserted) return InvalidArgument(fmt::format("place: request_id {} is already placed", id));
  it->second.spec = spec;
  it->second.hit_tokens = probe.hit_tokens;
  it->second.prompt_block_hashes = std::move(probe.block_hashes);
  it->second.place_waiting = true;
  order_.push_back(id);
  ++stats_.submitted;
  SubmitToSchedLocked(id);
  cv_.notify_all();

  // This call owns the request's erase while it waits (ForgetIfPlacedLocked skips it), so the
  // entry stays valid across the waits below.
  RequestState& st = requests_.at(id);
  auto finish = [&](Result<v1::Assignment> r) {
    st.place_waiting = false;
    if (st.phase == Phase::kDone) ForgetIfPlacedLocked(id);
    return r;
  };
  for (;;) {
    if (st.phase == Phase::kDone) {
      // Failed while queued (no live instance of a role can ever hold it: UnplaceableLocked).
      return finish(Unavailable(fmt::format("place: request {}: {}", id, st.error)));
    }
    if (sched_ != nullptr) {
      RunDecodePhaseLocked();
      RunPlacementLocked();
    }
    if (st.phase == Phase::kAssigned) {
      ++stats_.placed;
      return finish(st.placed);
    }
    if (shutdown_ || stopping_) {
      st.phase = Phase::kDone;
      RebuildLocked();  // takes it out of sched (rebuilds re-submit only kQueued requests)
      return finish(FailedPrecondition("place: the run is shut down"));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      // No pair within the wait: withdraw it from sched so it adds no phantom load later.
      st.phase = Phase::kDone;
      ++stats_.place_timeouts;
      RebuildLocked();
      const std::string live = LiveSummaryLocked();
      log::Warn("control: request {} not placed within {} ms ({})", id, request.wait_ms(), live);
      return finish(Unavailable(
          fmt::format("place: request {}: no prefill/decode instance pair could take it within "
                      "{} ms ({})",
                      id, request.wait_ms(), live)));
    }
    // Woken by reports, other requests' ends, registrations or deaths; after the deadline the
    // loop makes one more pass before it gives up.
    cv_.wait_until(lock, deadline);
  }
}

Status ControlState::ReportEngines(const v1::ReportEnginesRequest& request,
                                   v1::ReportEnginesReply* reply) {
  if (!options_.placement) {
    return FailedPrecondition(
        "report engines: engines report with their fetches; start the service with --placement "
        "for instances that do not fetch");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t dead : request.dead()) {
    if (dead >= engines_.size() || !engines_[dead].registered) {
      return InvalidArgument(fmt::format("report engines: unknown dead engine_id {}", dead));
    }
  }
  // Reports of engines held dead are dropped: their numbers describe an instance that must
  // register again before it is scheduled.
  google::protobuf::RepeatedPtrField<v1::EngineReport> live;
  for (const v1::EngineReport& r : request.reports()) {
    if (r.engine_id() < engines_.size() && engines_[r.engine_id()].registered &&
        !engines_[r.engine_id()].alive) {
      continue;
    }
    *live.Add() = r;
  }
  RETURN_IF_ERROR(ApplyReportsLocked(live, "report engines"));
  const Nanos now = clock_->Now();
  for (const v1::EngineReport& r : live) engines_[r.engine_id()].last_seen = now;
  bool died = false;
  for (uint32_t id : request.dead()) {
    EngineState& e = engines_[id];
    if (!e.alive) continue;
    e.alive = false;
    died = true;
    ++stats_.engines_dead;
    const std::string why = fmt::format("instance {} reported dead{}{}", e.info.name(),
                                        request.reason().empty() ? "" : ": ", request.reason());
    log::Error("control: {}; failing its {} placed requests", why, e.in_flight.size());
    const std::vector<uint64_t> lost(e.in_flight.begin(), e.in_flight.end());
    for (uint64_t rid : lost) RetryOrFailLocked(rid, why, nullptr, false);
  }
  if (died) RebuildLocked();
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    if (engines_[i].registered && !engines_[i].alive) reply->add_dead(i);
  }
  cv_.notify_all();  // new reports or a smaller live set: waiting Place calls look again
  return Status::Ok();
}

}  // namespace dualpath::control
