// ControlState: the replayer's side (Submit, WaitResults) and the engines' results (Report).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "control/state.h"
#include "dualpath/common/log.h"
#include "dualpath/control/client.h"

namespace dualpath::control {
namespace {

// Results per WaitResults reply: bounds the message; the replayer asks again for the rest.
constexpr size_t kMaxResultsPerReply = 1024;

// Submit is idempotent per request id: the same request submitted again (a client retrying a
// Submit whose reply it lost, or re-submitting after a restart it noticed late) is answered like
// the first time; the same id with other content is a client bug.
Result<int64_t> Resubmitted(const v1::RequestSpec& spec, const v1::RequestSpec& known,
                            int64_t hit) {
  if (spec.SerializeAsString() != known.SerializeAsString()) {
    return InvalidArgument(
        fmt::format("submit: duplicate request_id {} with other content", spec.request_id()));
  }
  log::Info("control: request {} submitted again; answered as before", spec.request_id());
  return hit;
}

}  // namespace

Result<int64_t> ControlState::Submit(const v1::RequestSpec& spec) {
  const uint64_t id = spec.request_id();
  if (options_.placement) {
    return FailedPrecondition("submit: this service places requests (--placement): use Place");
  }
  // The check engines run on what they receive, too ("submit: request 7: empty prompt").
  RETURN_IF_ERROR(ValidateRequest(spec, model_.vocab).WithContext("submit"));
  {
    // Cheap early answer for duplicates, before probing storage (checked again below).
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = requests_.find(id); it != requests_.end()) {
      return Resubmitted(spec, it->second.spec, it->second.hit_tokens);
    }
    if (shutdown_ || stopping_) return FailedPrecondition("submit: the run is shut down");
  }
  // The request's one hash pass and the storage probing (one stat per block) happen outside the
  // lock; the hashes travel with its assignment.
  PromptProbe probe =
      probe_->Probe(std::span<const uint32_t>(spec.prompt().data(), spec.prompt_size()));
  const int64_t hit = probe.hit_tokens;

  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_ || stopping_) return FailedPrecondition("submit: the run is shut down");
  auto [it, inserted] = requests_.try_emplace(id);
  if (!inserted) return Resubmitted(spec, it->second.spec, it->second.hit_tokens);
  it->second.spec = spec;
  it->second.hit_tokens = hit;
  it->second.prompt_block_hashes = std::move(probe.block_hashes);
  order_.push_back(id);
  ++stats_.submitted;
  SubmitToSchedLocked(id);
  log::Debug("control: submitted request {} agent {} turn {} prompt {} hit {} gen {}", id,
             spec.agent_id(), spec.turn(), spec.prompt_size(), hit, spec.gen_tokens());
  cv_.notify_all();
  return hit;
}

Status ControlState::Report(const v1::RequestResult& result) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = result.request_id();
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return NotFound(fmt::format("report: unknown request_id {}", id));
  }
  RequestState& st = it->second;
  if (st.phase != Phase::kAssigned || result.attempt() != st.attempt) {
    // A superseded attempt (its engine was declared dead, or it was already re-submitted): the
    // current attempt's result is the one that counts.
    ++stats_.stale_results;
    log::Warn("control: dropped stale result of request {} attempt {} (current attempt {})", id,
              result.attempt(), st.attempt);
    return Status::Ok();
  }
  if (!result.ok()) {
    RetryOrFailLocked(id, result.error().empty() ? "engine reported failure" : result.error(),
                      &result, /*defer=*/true,
                      result.error_code() == static_cast<int32_t>(Code::kEnginePeerFailed));
    cv_.notify_all();
    return Status::Ok();
  }
  ReleaseInFlightLocked(st, id);
  st.phase = Phase::kDone;
  ++stats_.completed;
  if (options_.placement) {
    ForgetIfPlacedLocked(id);
    cv_.notify_all();  // capacity freed: a Place call may be waiting for it
    return Status::Ok();
  }
  PushResultLocked(result);
  return Status::Ok();
}

void ControlState::WaitResults(const v1::WaitResultsRequest& request, v1::WaitResultsReply* reply) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(request.wait_ms());
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t after = request.after_seq();
  cv_.wait_until(lock, deadline, [&] { return results_.size() > after || shutdown_ || stopping_; });
  if (results_.size() <= after) return;
  const size_t end = std::min<size_t>(results_.size(), after + kMaxResultsPerReply);
  for (size_t i = after; i < end; ++i) *reply->add_results() = results_[i];
}

}  // namespace dualpath::control
