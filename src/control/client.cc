#include "dualpath/control/client.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "dualpath/common/check.h"
#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/control/v1/scheduler.grpc.pb.h"

namespace dualpath::control {

struct Client::Impl {
  std::string address;
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Scheduler::Stub> stub;

  // One call: a context with the deadline (the long poll's wait plus rpc_timeout), the RPC, and
  // its status read through the one table. `call` runs the stub method on the context.
  template <typename Call>
  Status Run(std::string_view rpc, uint32_t wait_ms, bool wait_for_ready, Call call) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms) +
                     std::chrono::nanoseconds(options.rpc_timeout));
    ctx.set_wait_for_ready(wait_for_ready);
    const grpc::Status status = call(&ctx);
    if (status.ok()) return Status::Ok();
    return FromGrpc(status, fmt::format("scheduler {} at {}", rpc, address));
  }
};

Client::Client(std::string address, ClientOptions options) : impl_(std::make_unique<Impl>()) {
  DUALPATH_CHECK(options.rpc_timeout > 0, "control::Client: rpc_timeout must be > 0");
  impl_->address = std::move(address);
  impl_->options = options;
  impl_->channel = MakeChannel(impl_->address, options.tls);
  impl_->stub = v1::Scheduler::NewStub(impl_->channel);
}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

const std::string& Client::address() const { return impl_->address; }

Status Client::WaitForConnected(Nanos timeout) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::nanoseconds(timeout);
  if (impl_->channel->WaitForConnected(deadline)) return Status::Ok();
  return Unavailable(fmt::format("scheduler service at {} not reachable within {:.1f} s",
                                 impl_->address, ToSeconds(timeout)));
}

Result<v1::RegisterEngineReply> Client::RegisterEngine(const v1::RegisterEngineRequest& request) {
  v1::RegisterEngineReply reply;
  // Waits for the channel (within the deadline): the service may still be starting.
  RETURN_IF_ERROR(impl_->Run("RegisterEngine", 0, /*wait_for_ready=*/true, [&](auto* ctx) {
    return impl_->stub->RegisterEngine(ctx, request, &reply);
  }));
  return reply;
}

Result<v1::FetchReply> Client::Fetch(const v1::FetchRequest& request) {
  v1::FetchReply reply;
  RETURN_IF_ERROR(impl_->Run("Fetch", request.wait_ms(), false,
                             [&](auto* ctx) { return impl_->stub->Fetch(ctx, request, &reply); }));
  return reply;
}

Status Client::ReportResult(const v1::RequestResult& result) {
  v1::ReportResultReply reply;
  return impl_->Run("ReportResult", 0, false,
                    [&](auto* ctx) { return impl_->stub->ReportResult(ctx, result, &reply); });
}

Result<v1::SubmitReply> Client::Submit(const v1::SubmitRequest& request) {
  v1::SubmitReply reply;
  RETURN_IF_ERROR(impl_->Run("Submit", 0, false,
                             [&](auto* ctx) { return impl_->stub->Submit(ctx, request, &reply); }));
  return reply;
}

Result<v1::WaitResultsReply> Client::WaitResults(const v1::WaitResultsRequest& request) {
  v1::WaitResultsReply reply;
  RETURN_IF_ERROR(impl_->Run("WaitResults", request.wait_ms(), false, [&](auto* ctx) {
    return impl_->stub->WaitResults(ctx, request, &reply);
  }));
  return reply;
}

Result<v1::ListEnginesReply> Client::ListEngines() {
  v1::ListEnginesReply reply;
  RETURN_IF_ERROR(impl_->Run("ListEngines", 0, false, [&](auto* ctx) {
    return impl_->stub->ListEngines(ctx, v1::ListEnginesRequest(), &reply);
  }));
  return reply;
}

Status Client::Shutdown() {
  v1::ShutdownReply reply;
  return impl_->Run("Shutdown", 0, false, [&](auto* ctx) {
    return impl_->stub->Shutdown(ctx, v1::ShutdownRequest(), &reply);
  });
}

Result<v1::PlaceReply> Client::Place(const v1::PlaceRequest& request) {
  v1::PlaceReply reply;
  RETURN_IF_ERROR(impl_->Run("Place", request.wait_ms(), false,
                             [&](auto* ctx) { return impl_->stub->Place(ctx, request, &reply); }));
  return reply;
}

Result<v1::ReportEnginesReply> Client::ReportEngines(const v1::ReportEnginesRequest& request) {
  v1::ReportEnginesReply reply;
  RETURN_IF_ERROR(impl_->Run("ReportEngines", 0, false, [&](auto* ctx) {
    return impl_->stub->ReportEngines(ctx, request, &reply);
  }));
  return reply;
}

std::string_view ReadSideName(v1::ReadSide side) {
  switch (side) {
    case v1::READ_SIDE_PREFILL:
      return "prefill";
    case v1::READ_SIDE_DECODE:
      return "decode";
    case v1::READ_SIDE_SPLIT:
      return "split";
    case v1::READ_SIDE_NONE:
      return "none";
    default:
      return "unspecified";
  }
}

}  // namespace dualpath::control
