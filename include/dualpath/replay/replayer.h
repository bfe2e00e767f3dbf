// The replayer: submits a ReplayWorkload's turns to the scheduler service and collects results.
//
// Offline (the paper's evaluation): every agent submits its first turn at once; turn i+1 is
// submitted when turn i's result arrives (closed loop, zero think time). Online: agents arrive as
// a Poisson process of rate `aps` agents per second (seeded), each then runs closed loop. Results
// are collected with the service's WaitResults long poll; each one becomes a RequestRecord with
// the timing pieces the paper reports (TTFT, TTST, TPOT) from the result's Timing.
//
// The service is reached through ServiceClient, so the loop runs unchanged against the real gRPC
// service (MakeGrpcServiceClient) or an in-process test double in unit tests.
//
// Thread safety: RunReplay runs on the caller's thread and calls the client from that thread
// only; a ServiceClient implementation need not be thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/control/v1/scheduler.pb.h"
#include "dualpath/replay/workload.h"

namespace dualpath::replay {

namespace pb = ::dualpath::control::v1;

class ServiceClient {
 public:
  virtual ~ServiceClient() = default;
  // Scheduler.Submit; returns the hit tokens the service found.
  virtual Result<int64_t> Submit(const pb::RequestSpec& spec) = 0;
  // Scheduler.WaitResults: results with sequence numbers > after_seq, waiting at most wait_ms
  // for the first one.
  virtual Result<std::vector<pb::SequencedResult>> WaitResults(uint64_t after_seq,
                                                               uint32_t wait_ms) = 0;
  // The service incarnation (scheduler.proto `service_epoch`) of the last successful reply; 0 when
  // the client does not know it. A change means the service restarted and lost every request.
  virtual uint64_t epoch() const { return 0; }
  // After a call failed with kUnavailable or kTimeout: waits up to `timeout` for the service to
  // accept connections again (Ok, or the reason it did not). kUnimplemented (the default): the
  // client cannot wait, and the replayer does not retry.
  virtual Status WaitForService(Nanos timeout) {
    (void)timeout;
    return Status(Code::kUnimplemented, "this client does not wait for its service");
  }
};

// A client of the real service at `address` ("unix:/path" or "HOST:PORT"), over the one scheduler
// client (control::Client, dualpath/control/client.h) with rpc_timeout_ms as its call timeout
// (a long poll gets it beyond its wait) and `tls` as its transport security towards a TCP
// address (dualpath/common/grpc_tls.h). rpc_timeout_ms must be > 0.
std::unique_ptr<ServiceClient> MakeGrpcServiceClient(const std::string& address,
                                                     uint32_t rpc_timeout_ms = 10000,
                                                     const GrpcTls& tls = {});

// What one request did. Times are wall-clock (CLOCK_REALTIME) nanoseconds, as in pb::Timing.
struct RequestRecord {
  uint64_t request_id = 0;
  uint64_t agent = 0;
  uint32_t turn = 0;
  uint64_t prompt_tokens = 0;
  uint32_t gen_tokens = 0;
  int64_t hit_tokens = 0;  // as the service found them at Submit
  pb::RequestResult result;
  Nanos submit_ns = 0;    // when the replayer submitted it (its own clock)
  Nanos accepted_ns = 0;  // when the service's Submit returned (hit probe and queueing done)
  Nanos result_ns = 0;    // when the replayer received the result

  // Pieces, seconds (negative when a timestamp is missing).
  double TtftS() const;     // first token - submitted
  double TtstS() const;     // second token - first token
  double TpotS() const;     // (done - first token) / (gen - 1); 0 for gen == 1
  double QueueS() const;    // prefill start - submitted
  double PrefillS() const;  // first token - prefill start
  double DecodeS() const;   // done - first token
  // The pieces of TTST (decode engine stamps; negative when missing): first token -> ready to
  // decode (the PE's remaining KV puts and PrefillDone), ready -> taken into decode (the DE's
  // queue); the rest of TTST is the first step.
  double HandoffS() const;
  double DecodeWaitS() const;
  // The decode engine's own time to the second token: ready -> first step done (decode wait +
  // the step), what its batching policy decides.
  double DeTtstS() const;
  // After the last step (decode engine stamps, then the replayer's receipt; negative when a
  // stamp is missing): last step -> retired (its blocks queued for write-behind), retired ->
  // reported (the DE's reporter; with --result-after-write on, the write-behind flush), reported
  // -> received (the service's delivery to the replayer).
  double SubmitRpcS() const;  // submitted -> the service's Submit returned
  double RetireS() const;
  double ReportS() const;
  double DeliverS() const;
};

struct ReplayOptions {
  bool online = false;
  double aps = 1.0;  // online: agent arrivals per second
  uint64_t seed = 1;
  uint32_t poll_ms = 200;         // WaitResults long-poll wait
  double timeout_s = 600;         // the whole replay; kTimeout past it
  uint64_t first_request_id = 1;  // request ids are first_request_id, +1, ... in submit order
  // Checked before every long poll (so at most poll_ms apart): an error ends the replay at once
  // with that status (`cluster run`: a child that died, a cluster taken down, a stop signal).
  // Empty: no check.
  std::function<Status()> health;
  // Called with every result as it arrives, before the agent's next turn is submitted (fault
  // injection synchronizes on it: "after N requests completed"). Empty: none.
  std::function<void(const RequestRecord&)> on_result;
  // How long a service that does not answer (a call fails with kUnavailable or kTimeout) is
  // waited for before the replay fails, in seconds; 0: fail at once. While it waits, `health`
  // still runs. When the service answers again with another epoch (it restarted and lost every
  // request), the replay re-submits every request it has in flight under the same request id:
  // Submit is idempotent per id, so a request is never run twice for one submission and never
  // lost. Needs a client that supports WaitForService.
  double service_outage_s = 30;
};

struct ReplayResult {
  std::vector<RequestRecord> records;  // in completion order
  Nanos start_ns = 0;                  // wall clock at the first submit
  Nanos end_ns = 0;                    // wall clock at the last result
  // Wall clock when the last agent submitted its second turn (the first turn that loads KV), and
  // when a quarter of the agents (at least one) had finished: the steady state, when (nearly)
  // every agent is loading (both 0 if that window is empty).
  Nanos steady_start_ns = 0;
  Nanos steady_end_ns = 0;
  int service_restarts = 0;  // service epochs seen after the first
  int resubmitted = 0;       // requests re-submitted after a restart
  double JctS() const { return ToSeconds(end_ns - start_ns); }
};

// Runs the workload to completion. `wall` gives CLOCK_REALTIME-comparable nanoseconds (the
// engines stamp Timing with CLOCK_REALTIME). Errors: the client's (an RPC failure), kTimeout.
// A request the service reports failed (ok = false) is recorded, and its agent goes on.
Result<ReplayResult> RunReplay(const ReplayWorkload& workload, const ReplayOptions& options,
                               ServiceClient& client, const Clock& wall);

// CLOCK_REALTIME as a Clock.
const Clock& WallClock();

}  // namespace dualpath::replay
