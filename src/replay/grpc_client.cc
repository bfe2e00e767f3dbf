// ServiceClient over gRPC: the replayer's side of scheduler.proto (Submit, WaitResults).
#include <grpcpp/grpcpp.h>

#include <chrono>

#include "dualpath/control/v1/scheduler.grpc.pb.h"
#include "dualpath/replay/replayer.h"

namespace dualpath::replay {
namespace {

Status FromGrpc(const grpc::Status& s, std::string_view what) {
  // A gone service (connection refused, shut down) and a rejected call are both kUnavailable
  // here: the replay cannot go on either way; the message carries gRPC's code and text.
  const Code code =
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? Code::kTimeout : Code::kUnavailable;
  return Status(code, std::string(what) + ": grpc " + std::to_string(s.error_code()) + " " +
                          s.error_message());
}

class GrpcServiceClient final : public ServiceClient {
 public:
  GrpcServiceClient(const std::string& address, uint32_t rpc_timeout_ms)
      : stub_(pb::Scheduler::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        rpc_timeout_ms_(rpc_timeout_ms) {}

  Result<int64_t> Submit(const pb::RequestSpec& spec) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(0));
    pb::SubmitRequest req;
    *req.mutable_request() = spec;
    pb::SubmitReply reply;
    grpc::Status s = stub_->Submit(&ctx, req, &reply);
    if (!s.ok()) {
      return FromGrpc(s, "Submit request " + std::to_string(spec.request_id()));
    }
    return reply.hit_tokens();
  }

  Result<std::vector<pb::SequencedResult>> WaitResults(uint64_t after_seq,
                                                       uint32_t wait_ms) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(wait_ms));
    pb::WaitResultsRequest req;
    req.set_after_seq(after_seq);
    req.set_wait_ms(wait_ms);
    pb::WaitResultsReply reply;
    grpc::Status s = stub_->WaitResults(&ctx, req, &reply);
    if (!s.ok()) {
      return FromGrpc(s, "WaitResults");
    }
    std::vector<pb::SequencedResult> out;
    out.reserve(static_cast<size_t>(reply.results_size()));
    for (pb::SequencedResult& r : *reply.mutable_results()) {
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  std::chrono::system_clock::time_point Deadline(uint32_t wait_ms) const {
    return std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms + rpc_timeout_ms_);
  }

  std::unique_ptr<pb::Scheduler::Stub> stub_;
  uint32_t rpc_timeout_ms_;
};

}  // namespace

std::unique_ptr<ServiceClient> MakeGrpcServiceClient(const std::string& address,
                                                     uint32_t rpc_timeout_ms) {
  return std::make_unique<GrpcServiceClient>(address, rpc_timeout_ms);
}

}  // namespace dualpath::replay
