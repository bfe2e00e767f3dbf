// ServiceMetrics: what the scheduler service exports on /metrics (docs/metrics.md): requests by
// system and event (read at scrape time from ServiceStats, the counters the service already keeps),
// open requests (a queue length), request latencies from the engines' results (histograms: TTFT,
// end to end, and per phase), the storage bytes of each read path those results carry, and RPC
// errors by method and code.
//
// Ownership: owns its families and their registration; `stats` must stay callable until it is
// destroyed (SchedulerService declares it after its state). Thread safety: any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "dualpath/common/metrics.h"
#include "dualpath/common/status.h"
#include "dualpath/control/service.h"
#include "dualpath/control/v1/scheduler.pb.h"

namespace dualpath::control {

class ServiceMetrics {
 public:
  ServiceMetrics(metrics::Registry& registry, std::string system,
                 std::function<ServiceStats()> stats);
  // Before Submit hands a request to the state: its submit time (CLOCK_REALTIME, the clock of the
  // engines' Timing stamps) is kept until its ok result (recorded first, so a result cannot
  // overtake it). Returns false if the id is already open (a duplicate: nothing recorded).
  bool OnSubmitting(uint64_t request_id);
  // The state refused a request OnSubmitting recorded.
  void OnSubmitRefused(uint64_t request_id);
  // An engine reported `r` (before the state judged it). An ok result of a request still open is
  // observed (latencies, read bytes) and closes it; a second ok result (a superseded attempt's)
  // finds it closed and is not counted twice.
  void OnResult(const v1::RequestResult& r);
  // An RPC handler returns `s` (counted when not OK).
  void OnRpc(const char* method, const Status& s);

 private:
  const std::string system_;
  metrics::Group group_;
  metrics::Histogram& ttft_;
  metrics::Histogram& e2e_;
  metrics::HistogramFamily& phase_;
  metrics::Counter* read_pe_ = nullptr;
  metrics::Counter* read_de_ = nullptr;
  metrics::CounterFamily& rpc_errors_;
  std::mutex mu_;
  std::unordered_map<uint64_t, int64_t> submitted_ns_;  // open requests; guarded by mu_
};

}  // namespace dualpath::control
