// control::Client: the one client of the scheduler service (the Scheduler service of
// scheduler.proto, docs/control.md). Everything that talks to the service goes through it:
// engines (RegisterEngine, Fetch, ReportResult), the replayer (Submit, WaitResults), `dualpath
// cluster run` and `dualpath control engines|shutdown` (ListEngines, Shutdown), tests and
// benchmarks. It holds the rules those callers share:
//   - the channel: TLS per ClientOptions::tls on TCP (plain on unix sockets), no message size
//     limits, fast reconnects (common/grpc_channel.h); a service that refuses the client's
//     certificate (or its absence) fails every call with kUnavailable;
//   - deadlines: a call gets ClientOptions::rpc_timeout; a long poll (Fetch, WaitResults) gets its
//     wait_ms plus rpc_timeout, so a service that hangs cannot hang a client;
//   - RegisterEngine waits for the service to come up (within its deadline): engines may start
//     before it; every other call fails at once when the service is not there;
//   - errors: the one Status <-> gRPC table (common/grpc_status.h), the message naming the call
//     and the address ("scheduler Fetch at unix:/run/dp/sched.sock: ..."). The service answers
//     bad input (ValidateRequest, below) with kInvalidArgument naming what is wrong.
// Besides the client, the library holds the one request validator (ValidateRequest) that the
// service and the engines share.
//
//   control::Client scheduler("unix:/run/dp/sched.sock");
//   RETURN_IF_ERROR(scheduler.WaitForConnected(10 * kNanosPerSecond));
//   ASSIGN_OR_RETURN(v1::SubmitReply reply, scheduler.Submit(request));
//
// The library (dualpath_control_client) depends on common, common_grpc and the proto only, and
// this header names no gRPC type, so a language binding can wrap it as it is.
//
// Thread safety: every method may be called from any thread, concurrently (gRPC's channel and
// stub are thread-safe). Movable, not copyable; a moved-from Client may only be destroyed or
// assigned to.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/control/v1/scheduler.pb.h"

namespace dualpath::control {

struct ClientOptions {
  // Deadline of a call, and the margin a long poll gets beyond its wait. Must be > 0.
  Nanos rpc_timeout = 10 * kNanosPerSecond;
  // Transport security towards a TCP address (dualpath/common/grpc_tls.h): the CA that verifies
  // the service, this client's certificate for mutual TLS, or insecure. Unused for unix sockets.
  GrpcTls tls;
};

class Client {
 public:
  // A client of the service at "unix:PATH" or "HOST:PORT". Connects lazily (on the first call or
  // WaitForConnected) and reconnects by itself; nothing fails here.
  explicit Client(std::string address, ClientOptions options = {});
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  const std::string& address() const;

  // Waits up to `timeout` for the channel to connect. kUnavailable "scheduler service at ADDR not
  // reachable within N s" if it did not.
  Status WaitForConnected(Nanos timeout);

  // Engines (docs/e2e.md). Fetch long-polls up to request.wait_ms().
  Result<v1::RegisterEngineReply> RegisterEngine(const v1::RegisterEngineRequest& request);
  Result<v1::FetchReply> Fetch(const v1::FetchRequest& request);
  Status ReportResult(const v1::RequestResult& result);

  // The replayer. WaitResults long-polls up to request.wait_ms().
  Result<v1::SubmitReply> Submit(const v1::SubmitRequest& request);
  Result<v1::WaitResultsReply> WaitResults(const v1::WaitResultsRequest& request);

  // Operators and `cluster run`.
  Result<v1::ListEnginesReply> ListEngines();
  Status Shutdown();

  // Placement (a proxy in front of inference instances; `control serve --placement`). Place
  // waits up to request.wait_ms() (plus the rpc timeout) for a decision.
  Result<v1::PlaceReply> Place(const v1::PlaceRequest& request);
  Result<v1::ReportEnginesReply> ReportEngines(const v1::ReportEnginesRequest& request);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Message limits (docs/control.md "Message limits"). A request's context, prompt plus generated
// tokens, is at most kMaxRequestTokens (1 M: the longest context of any model, as
// replay::kMaxContext), and its teacher tokens too (ValidateRequest). Every message the scheduler
// service receives is then at most kMaxSchedulerRequestBytes: the largest, a Submit (or a
// ReportResult), carries a RequestSpec of at most 2 x 2^20 token ids of at most 5 bytes each
// (10 MiB) plus a few fields. The service refuses a larger message with RESOURCE_EXHAUSTED before
// parsing it (common/grpc_server.h).
inline constexpr uint64_t kMaxRequestTokens = uint64_t{1} << 20;
inline constexpr int64_t kMaxSchedulerRequestBytes = int64_t{16} << 20;
static_assert(2 * static_cast<int64_t>(kMaxRequestTokens) * 5 + (int64_t{1} << 20) <=
              kMaxSchedulerRequestBytes);

// The one check of a request (RequestSpec) against what its fields promise, shared by everything
// that receives one: the service refuses a bad Submit with it ("submit: " + this message), and
// engines check each assignment's request with it (a PE admitting it, a DE starting its decode),
// so bad input fails that request instead of the engine. A client may run it before sending.
// Ok, or kInvalidArgument naming the request and the first problem found, in this order:
//   "request 7: empty prompt"
//   "request 7: gen_tokens is 0 (must be >= 1)"
//   "request 7: teacher has 3 tokens, needs >= gen_tokens - 1 = 4"
//   "request 7: 1048000 prompt + 1000 generated tokens, more than kMaxRequestTokens = 1048576"
//   "request 7: teacher has 2000000 tokens, more than kMaxRequestTokens = 1048576"
//   "request 7: prompt token 5000 at position 3 >= vocab 4096" (then the same for teacher tokens:
//   every one, including any beyond the gen_tokens - 1 the decode steps feed)
// `teacher_forced` false (a placed request, which an inference engine generates freely): the
// teacher is not required (its tokens, if any, are still checked).
Status ValidateRequest(const v1::RequestSpec& spec, uint32_t vocab, bool teacher_forced = true);

// "prefill", "decode", "split", "none"; "unspecified" otherwise.
std::string_view ReadSideName(v1::ReadSide side);

}  // namespace dualpath::control
