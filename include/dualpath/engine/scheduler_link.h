// SchedulerLink: what an engine needs from the scheduler service (docs/e2e.md): register, fetch
// work as a group leader (long poll, carrying the engine's load report), and report a request's
// result. The production implementation (ConnectScheduler) is the one scheduler client,
// control::Client (dualpath/control/client.h), talking to `dualpath control serve`; unit tests put
// a test double behind the same interface (src/engine/local_scheduler.h).
//
// Thread safety: implementations must allow Fetch and ReportResult to be called concurrently
// from different threads (the fetch loop and the pipelines).
#pragma once

#include <memory>
#include <string>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/control/v1/scheduler.pb.h"

namespace dualpath::engine {

class SchedulerLink {
 public:
  virtual ~SchedulerLink() = default;
  virtual Result<control::v1::RegisterEngineReply> Register(
      const control::v1::RegisterEngineRequest& request) = 0;
  // Long poll: returns when there is work or after request.wait_ms() (plus transport slack).
  virtual Result<control::v1::FetchReply> Fetch(const control::v1::FetchRequest& request) = 0;
  virtual Status ReportResult(const control::v1::RequestResult& result) = 0;
};

// A control::Client of the service at `address` ("unix:/path" or "host:port"). Connects lazily;
// Register waits for a service that is still starting (within its deadline). Failures are the
// client's: the one Status <-> gRPC table (kUnavailable: the service is not reachable), the
// message naming the RPC and the address.
// `tls`: the client's transport security towards a TCP address (dualpath/common/grpc_tls.h).
std::unique_ptr<SchedulerLink> ConnectScheduler(const std::string& address, const GrpcTls& tls);

}  // namespace dualpath::engine
