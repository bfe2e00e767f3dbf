#include "dualpath/control/client.h"

#include <fmt/format.h>

namespace dualpath::control {

grpc::ChannelArguments DefaultChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   DefaultChannelArgs());
}

std::unique_ptr<v1::Scheduler::Stub> Connect(const std::string& address) {
  return v1::Scheduler::NewStub(MakeChannel(address));
}

Status WaitForChannel(grpc::Channel& channel, const std::string& address, Nanos timeout) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::nanoseconds(timeout);
  if (channel.WaitForConnected(deadline)) return Status::Ok();
  return Unavailable(fmt::format("scheduler service at {} not reachable within {:.1f} s", address,
                                 ToSeconds(timeout)));
}

std::chrono::system_clock::time_point LongPollDeadline(uint32_t wait_ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms) +
         std::chrono::seconds(10);
}

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (status.code()) {
    case Code::kInvalidArgument:
    case Code::kKvBadToken:
    case Code::kParseError:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Code::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case Code::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case Code::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case Code::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case Code::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case Code::kTimeout:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case Code::kUnimplemented:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case Code::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    default:
      break;
  }
  return grpc::Status(code, status.message());
}

Status FromGrpc(const grpc::Status& status, std::string_view rpc) {
  if (status.ok()) return Status::Ok();
  std::string msg = fmt::format("rpc {}: {}", rpc, status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return Status(Code::kInvalidArgument, std::move(msg));
    case grpc::StatusCode::NOT_FOUND:
      return Status(Code::kNotFound, std::move(msg));
    case grpc::StatusCode::FAILED_PRECONDITION:
      return Status(Code::kFailedPrecondition, std::move(msg));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Status(Code::kTimeout, std::move(msg));
    case grpc::StatusCode::UNAVAILABLE:
      return Status(Code::kUnavailable, std::move(msg));
    default:
      return Status(Code::kControlRpcError,
                    fmt::format("{} (grpc code {})", msg, static_cast<int>(status.error_code())));
  }
}

v1::EngineReport ToProto(const sched::EngineReport& report, uint32_t engine_id) {
  v1::EngineReport r;
  r.set_engine_id(engine_id);
  r.set_unfinished_requests(report.unfinished_requests);
  r.set_unfinished_tokens(report.unfinished_tokens);
  r.set_read_queue_tokens(report.read_queue_tokens);
  r.set_hbm_free_tokens(report.hbm_free_tokens);
  return r;
}

Result<sched::Assignment> ToSched(const v1::Assignment& a) {
  sched::Assignment s;
  s.request = RequestId(a.request().request_id());
  s.session = SessionId(a.request().agent_id());
  s.prefill = EngineId(a.prefill_engine());
  s.decode = EngineId(a.decode_engine());
  s.prompt_tokens = a.request().prompt_size();
  s.hit_tokens = a.hit_tokens();
  s.expected_gen_tokens = a.request().gen_tokens();
  s.prefill_read_tokens = a.prefill_read_tokens();
  s.decode_read_tokens = a.decode_read_tokens();
  switch (a.side()) {
    case v1::READ_SIDE_PREFILL:
    case v1::READ_SIDE_NONE:
      s.side = sched::ReadSide::kPrefill;
      break;
    case v1::READ_SIDE_DECODE:
      s.side = sched::ReadSide::kDecode;
      break;
    case v1::READ_SIDE_SPLIT:
      s.side = sched::ReadSide::kSplit;
      break;
    default:
      return InvalidArgument(fmt::format("assignment of request {}: unknown read side {}",
                                         a.request().request_id(), static_cast<int>(a.side())));
  }
  return s;
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
