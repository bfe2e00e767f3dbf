#include "dualpath/engine/scheduler_link.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <chrono>

#include "dualpath/control/v1/scheduler.grpc.pb.h"

namespace dualpath::engine {
namespace {

namespace v1c = control::v1;

Status FromGrpcStatus(const grpc::Status& s, std::string_view rpc, const std::string& addr) {
  if (s.ok()) {
    return Status::Ok();
  }
  std::string msg = fmt::format("scheduler {} at {}: {}", rpc, addr, s.error_message());
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Unavailable(msg);
  }
  if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    return InvalidArgument(msg);
  }
  return Status(Code::kEnginePeerFailed,
                fmt::format("{} (gRPC code {})", msg, static_cast<int>(s.error_code())));
}

class GrpcSchedulerLink final : public SchedulerLink {
 public:
  explicit GrpcSchedulerLink(const std::string& address) : address_(address) {
    grpc::ChannelArguments args;
    // The service may start after the engines (or restart): retry connecting quickly.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(-1);  // assignments carry every prompt token id
    args.SetMaxSendMessageSize(-1);
    stub_ = v1c::Scheduler::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }

  Result<v1c::RegisterEngineReply> Register(const v1c::RegisterEngineRequest& request) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.set_wait_for_ready(true);  // the service may still be starting
    v1c::RegisterEngineReply reply;
    RETURN_IF_ERROR(
        FromGrpcStatus(stub_->RegisterEngine(&ctx, request, &reply), "RegisterEngine", address_));
    return reply;
  }

  Result<v1c::FetchReply> Fetch(const v1c::FetchRequest& request) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(request.wait_ms()) + std::chrono::seconds(5));
    v1c::FetchReply reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->Fetch(&ctx, request, &reply), "Fetch", address_));
    return reply;
  }

  Status ReportResult(const v1c::RequestResult& result) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1c::ReportResultReply reply;
    return FromGrpcStatus(stub_->ReportResult(&ctx, result, &reply), "ReportResult", address_);
  }

 private:
  std::string address_;
  std::unique_ptr<v1c::Scheduler::Stub> stub_;
};

}  // namespace

std::unique_ptr<SchedulerLink> ConnectScheduler(const std::string& address) {
  return std::make_unique<GrpcSchedulerLink>(address);
}

}  // namespace dualpath::engine
