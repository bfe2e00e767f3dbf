// SchedulerService: the gRPC Scheduler service of scheduler.proto, i.e. the pure §6 scheduler
// (sched::Scheduler) behind a mutex, plus what a real deployment needs around it: engine
// registration, long-poll fetches, hit detection in storage, result collection for the replayer,
// engine liveness with re-submission, and shutdown. docs/control.md describes the flows.
//
// ControlServer (server.h) runs one on a listening address; tests may also register it with
// their own grpc::Server.
//
// Ownership: the service owns its scheduler state and its read-only view of the block store.
// Thread safety: every RPC handler may run on any gRPC thread concurrently; CheckLiveness, Stop
// and the accessors may be called from any thread.
#pragma once

#include <chrono>
#include <memory>

#include "dualpath/common/status.h"
#include "dualpath/control/options.h"
#include "dualpath/control/v1/scheduler.grpc.pb.h"

namespace dualpath::control {

class ControlState;
class ServiceMetrics;

// Monotonic counters since start (for logs, tests and the serve summary line).
struct ServiceStats {
  int64_t submitted = 0;
  int64_t assigned = 0;      // complete assignments handed to prefill engines
  int64_t completed = 0;     // ok results forwarded
  int64_t failed = 0;        // failed results forwarded (attempts exhausted)
  int64_t resubmitted = 0;   // attempts re-submitted (failed result or dead engine)
  int64_t engines_dead = 0;  // engines declared dead
  // Times an engine was cut off as unreachable over the compute network, and taken back.
  int64_t engines_cut_off = 0;
  int64_t engines_reconnected = 0;
  int64_t stale_results = 0;  // results of a superseded attempt, dropped
  int64_t rebuilds = 0;       // sched::Scheduler (re)creations
  // Routing (ServiceOptions::routing other than dualpath): assignments whose prefill engine was
  // fixed by the routing, and those that fell back to the normal choice (a retry, a dead fixed
  // engine, or one too small for the prompt).
  int64_t routed = 0;
  int64_t route_fallbacks = 0;
  // Placement (--placement): Place calls answered with an assignment, and those that found no
  // instance pair within their wait (withdrawn).
  int64_t placed = 0;
  int64_t place_timeouts = 0;
};

class SchedulerService final : public v1::Scheduler::Service {
 public:
  // Validates the options, parses the model spec, opens the store for probing.
  static Result<std::unique_ptr<SchedulerService>> Create(const ServiceOptions& options);
  ~SchedulerService() override;

  grpc::Status RegisterEngine(grpc::ServerContext* ctx, const v1::RegisterEngineRequest* req,
                              v1::RegisterEngineReply* reply) override;
  grpc::Status Fetch(grpc::ServerContext* ctx, const v1::FetchRequest* req,
                     v1::FetchReply* reply) override;
  grpc::Status ReportResult(grpc::ServerContext* ctx, const v1::RequestResult* req,
                            v1::ReportResultReply* reply) override;
  grpc::Status Submit(grpc::ServerContext* ctx, const v1::SubmitRequest* req,
                      v1::SubmitReply* reply) override;
  grpc::Status Place(grpc::ServerContext* ctx, const v1::PlaceRequest* req,
                     v1::PlaceReply* reply) override;
  grpc::Status ReportEngines(grpc::ServerContext* ctx, const v1::ReportEnginesRequest* req,
                             v1::ReportEnginesReply* reply) override;
  grpc::Status WaitResults(grpc::ServerContext* ctx, const v1::WaitResultsRequest* req,
                           v1::WaitResultsReply* reply) override;
  grpc::Status ListEngines(grpc::ServerContext* ctx, const v1::ListEnginesRequest* req,
                           v1::ListEnginesReply* reply) override;
  grpc::Status Shutdown(grpc::ServerContext* ctx, const v1::ShutdownRequest* req,
                        v1::ShutdownReply* reply) override;

  // Declares dead every engine that has not fetched for 3 x heartbeat by the options' clock, and
  // re-submits its in-flight requests. Also run at the start of every Fetch; ControlServer calls
  // it periodically. Returns the number of engines declared dead by this call.
  int CheckLiveness();
  // The server is going away: every long poll returns now (Fetch with shutdown = true) and later
  // ones return at once.
  void Stop();
  // True once Shutdown was called and every live registered engine has seen shutdown = true.
  bool Finished() const;
  // Waits until Finished() or Stop() (or the timeout); returns Finished().
  bool WaitFinished(std::chrono::milliseconds timeout) const;

  ServiceStats stats() const;
  const ServiceOptions& options() const;

 private:
  explicit SchedulerService(std::unique_ptr<ControlState> state);
  // Counts `s` by method (metrics on) and converts it.
  grpc::Status Done(const char* method, const Status& s);
  std::unique_ptr<ControlState> state_;
  std::unique_ptr<ServiceMetrics> metrics_;  // after state_: its callbacks read the state
};

}  // namespace dualpath::control
