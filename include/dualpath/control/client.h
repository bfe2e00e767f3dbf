// Client helpers for the scheduler service, for engines and the replayer: a channel with the
// settings the service expects, a stub, a readiness wait, and Status conversions both ways.
//
//   auto stub = dualpath::control::Connect("unix:/run/dp/sched.sock");
//   RETURN_IF_ERROR(dualpath::control::WaitForServer(addr, 10 * kNanosPerSecond));
//   grpc::ClientContext ctx;
//   v1::SubmitReply reply;
//   RETURN_IF_ERROR(FromGrpc(stub->Submit(&ctx, req, &reply), "Submit"));
//
// Long polls: Fetch and WaitResults block up to their wait_ms; give their ClientContext a deadline
// a little beyond it (see LongPollDeadline) so a dead service cannot hang a client forever.
//
// Thread safety: stubs and channels are thread-safe (gRPC); the functions are pure.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/control/v1/scheduler.grpc.pb.h"
#include "dualpath/sched/types.h"

namespace dualpath::control {

// Channel arguments shared by the server and clients: unlimited message sizes (an assignment
// carries every prompt token id; a long agentic prompt is hundreds of KiB).
grpc::ChannelArguments DefaultChannelArgs();

// An insecure channel to "unix:PATH" or "HOST:PORT" (the service runs inside the cluster's
// private networks; docs/control.md).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);
std::unique_ptr<v1::Scheduler::Stub> Connect(const std::string& address);

// Waits until the channel is connected. kUnavailable naming the address after `timeout`.
Status WaitForChannel(grpc::Channel& channel, const std::string& address, Nanos timeout);

// A deadline for a long-poll RPC waiting `wait_ms`: the wait plus a margin for the round trip.
std::chrono::system_clock::time_point LongPollDeadline(uint32_t wait_ms);

// dualpath Status -> grpc::Status (kInvalidArgument -> INVALID_ARGUMENT, kNotFound -> NOT_FOUND,
// kFailedPrecondition -> FAILED_PRECONDITION, kUnavailable -> UNAVAILABLE, ...; the message is
// kept).
grpc::Status ToGrpc(const Status& status);
// grpc::Status -> dualpath Status, the message prefixed with "rpc <rpc>: ". INVALID_ARGUMENT maps
// to kInvalidArgument (so CLIs exit 2 on bad input); transport failures to kControlRpcError.
Status FromGrpc(const grpc::Status& status, std::string_view rpc);

// Proto <-> sched conversions (engines building reports; code reusing sched types).
v1::EngineReport ToProto(const sched::EngineReport& report, uint32_t engine_id);
// The sched view of an assignment (engine ids are the service's engine ids). READ_SIDE_NONE
// (Oracle) maps to kPrefill with no read tokens; unknown sides are kInvalidArgument.
Result<sched::Assignment> ToSched(const v1::Assignment& assignment);
std::string_view ReadSideName(v1::ReadSide side);  // "prefill", "decode", "split", "none"

}  // namespace dualpath::control
