#include "control/service_metrics.h"

#include <time.h>

#include <algorithm>
#include <utility>

namespace dualpath::control {
namespace {

// Seconds between two CLOCK_REALTIME nanosecond stamps of a result's Timing; < 0 if unset.
double Between(int64_t from_ns, int64_t to_ns) {
  return from_ns > 0 && to_ns >= from_ns ? static_cast<double>(to_ns - from_ns) * 1e-9 : -1;
}

}  // namespace

ServiceMetrics::ServiceMetrics(metrics::Registry& registry, std::string system,
                               std::function<ServiceStats()> stats)
    : system_(std::move(system)),
      group_(registry),
      ttft_(group_
                .Histogram("dualpath_request_ttft_seconds",
                           "Time to first token of requests with an ok result (submit to prefill "
                           "done), by system.",
                           {"system"}, metrics::LatencyBuckets())
                .With({system_})),
      e2e_(group_
               .Histogram("dualpath_request_seconds",
                          "Submit to done of requests with an ok result (the request's JCT), by "
                          "system.",
                          {"system"}, metrics::LatencyBuckets())
               .With({system_})),
      phase_(group_.Histogram("dualpath_request_phase_seconds",
                              "Per-phase time of requests with an ok result: queue (submit to "
                              "prefill start), prefill (to first token), decode (to done).",
                              {"system", "phase"}, metrics::LatencyBuckets())),
      rpc_errors_(group_.Counter("dualpath_service_rpc_errors_total",
                                 "Scheduler service RPCs that returned an error, by method and "
                                 "error code.",
                                 {"system", "method", "code"})) {
  group_
      .Gauge("dualpath_process_info", "1 for each running dualpath process, by kind and name.",
             {"system", "kind", "name"})
      .With({system_, "service", "service"})
      .Set(1);
  metrics::CounterFamily& read =
      group_.Counter("dualpath_request_read_bytes_total",
                     "Storage bytes read for requests with an ok result, by read path, as the "
                     "results report them (the run JSON's read_bytes_prefill / read_bytes_decode).",
                     {"system", "path"});
  read_pe_ = &read.With({system_, "pe"});
  read_de_ = &read.With({system_, "de"});
  metrics::CallbackFamily& requests =
      group_.Callback("dualpath_service_requests_total",
                      "Requests by system and event: submitted, assigned, completed (ok results "
                      "forwarded), failed (attempts exhausted), resubmitted (attempts retried).",
                      metrics::Type::kCounter, {"system", "event"});
  auto field = [stats](int64_t ServiceStats::*f) {
    return [stats, f] { return static_cast<double>(stats().*f); };
  };
  requests.Add({system_, "submitted"}, field(&ServiceStats::submitted));
  requests.Add({system_, "assigned"}, field(&ServiceStats::assigned));
  requests.Add({system_, "completed"}, field(&ServiceStats::completed));
  requests.Add({system_, "failed"}, field(&ServiceStats::failed));
  requests.Add({system_, "resubmitted"}, field(&ServiceStats::resubmitted));
  group_
      .Callback("dualpath_service_engines_dead_total", "Engines the service declared dead.",
                metrics::Type::kCounter, {"system"})
      .Add({system_}, field(&ServiceStats::engines_dead));
  group_
      .Callback("dualpath_service_engines_cut_off_total",
                "Times the service cut an engine off as unreachable over the compute network.",
                metrics::Type::kCounter, {"system"})
      .Add({system_}, field(&ServiceStats::engines_cut_off));
  group_
      .Callback("dualpath_service_open_requests",
                "Requests submitted and not yet finished (queued, assigned or being retried).",
                metrics::Type::kGauge, {"system"})
      .Add({system_}, [stats] {
        const ServiceStats s = stats();
        return static_cast<double>(s.submitted - s.completed - s.failed);
      });
}

bool ServiceMetrics::OnSubmitting(uint64_t request_id) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_ns_.try_emplace(request_id, int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec)
      .second;
}

void ServiceMetrics::OnSubmitRefused(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  submitted_ns_.erase(request_id);
}

void ServiceMetrics::OnResult(const v1::RequestResult& r) {
  if (!r.ok()) return;
  int64_t submitted = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = submitted_ns_.find(r.request_id());
    if (it == submitted_ns_.end()) return;  // unknown, or already counted
    submitted = it->second;
    submitted_ns_.erase(it);
  }
  const v1::Timing& t = r.timing();
  if (const double s = Between(submitted, t.first_token_ns()); s >= 0) ttft_.Observe(s);
  if (const double s = Between(submitted, t.done_ns()); s >= 0) e2e_.Observe(s);
  const std::pair<const char*, double> phases[] = {
      {"queue", Between(submitted, t.prefill_start_ns())},
      {"prefill", Between(t.prefill_start_ns(), t.first_token_ns())},
      {"decode", Between(t.first_token_ns(), t.done_ns())}};
  for (const auto& [name, s] : phases) {
    if (s >= 0) phase_.With({system_, name}).Observe(s);
  }
  read_pe_->Inc(static_cast<uint64_t>(std::max<int64_t>(0, r.read_bytes_prefill())));
  read_de_->Inc(static_cast<uint64_t>(std::max<int64_t>(0, r.read_bytes_decode())));
}

void ServiceMetrics::OnRpc(const char* method, const Status& s) {
  if (s.ok()) return;
  rpc_errors_.With({system_, method, std::string(CodeName(s.code()))}).Inc();
}

}  // namespace dualpath::control
