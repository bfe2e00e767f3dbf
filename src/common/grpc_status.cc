#include "dualpath/common/grpc_status.h"

#include <fmt/format.h>

#include <string>

#include "dualpath/common/bad_input.h"

namespace dualpath {

grpc::StatusCode GrpcCodeFor(Code code) {
  using G = grpc::StatusCode;
  // Bad input (common/bad_input.h, the codes the CLI exits 2 for), kOutOfRange aside.
  if (code != Code::kOutOfRange && IsBadInputCode(code)) return G::INVALID_ARGUMENT;
  switch (code) {
    case Code::kOk:
      return G::OK;
    case Code::kCancelled:
      return G::CANCELLED;
    case Code::kControlRpcError:
      return G::UNKNOWN;
    case Code::kTimeout:
      return G::DEADLINE_EXCEEDED;
    case Code::kNotFound:
    case Code::kStorageMiss:
    case Code::kTestbedNotFound:
      return G::NOT_FOUND;
    case Code::kAlreadyExists:
    case Code::kTestbedExists:
      return G::ALREADY_EXISTS;
    case Code::kPermissionDenied:
    case Code::kTestbedNotRoot:
      return G::PERMISSION_DENIED;
    case Code::kResourceExhausted:
    case Code::kStorageNoSpace:
    case Code::kStorageQueueFull:
    case Code::kPoolFull:
    case Code::kPoolIndexFull:
    case Code::kEngineNoRoom:
      return G::RESOURCE_EXHAUSTED;
    case Code::kFailedPrecondition:
    case Code::kCoordNotLeader:  // a standby store master: ask the leader (docs/store.md)
      return G::FAILED_PRECONDITION;
    case Code::kOutOfRange:
      return G::OUT_OF_RANGE;
    case Code::kUnimplemented:
      return G::UNIMPLEMENTED;
    case Code::kUnavailable:
    case Code::kStorageClosed:
    case Code::kTransferPeerDead:
    case Code::kEnginePeerFailed:
    case Code::kEngineStopped:
      return G::UNAVAILABLE;
    case Code::kCorruption:
      return G::DATA_LOSS;
    default:  // kInternal, kIoError and every other component code
      return G::INTERNAL;
  }
}

Code CodeForGrpc(grpc::StatusCode code) {
  using G = grpc::StatusCode;
  switch (code) {
    case G::OK:
      return Code::kOk;
    case G::CANCELLED:
      return Code::kCancelled;
    case G::INVALID_ARGUMENT:
      return Code::kInvalidArgument;
    case G::DEADLINE_EXCEEDED:
      return Code::kTimeout;
    case G::NOT_FOUND:
      return Code::kNotFound;
    case G::ALREADY_EXISTS:
      return Code::kAlreadyExists;
    case G::PERMISSION_DENIED:
    case G::UNAUTHENTICATED:
      return Code::kPermissionDenied;
    case G::RESOURCE_EXHAUSTED:
      return Code::kResourceExhausted;
    case G::FAILED_PRECONDITION:
      return Code::kFailedPrecondition;
    case G::OUT_OF_RANGE:
      return Code::kOutOfRange;
    case G::UNIMPLEMENTED:
      return Code::kUnimplemented;
    case G::INTERNAL:
      return Code::kInternal;
    case G::UNAVAILABLE:
      return Code::kUnavailable;
    case G::DATA_LOSS:
      return Code::kCorruption;
    default:  // UNKNOWN, ABORTED, and values outside gRPC's table: the call failed, no more known
      return Code::kControlRpcError;
  }
}

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const grpc::StatusCode code = GrpcCodeFor(status.code());
  // A code the client would read back as another one travels in the text.
  return grpc::Status(code,
                      CodeForGrpc(code) == status.code() ? status.message() : status.ToString());
}

Status FromGrpc(const grpc::Status& status, std::string_view what) {
  if (status.ok()) return Status::Ok();
  const Code code = CodeForGrpc(status.error_code());
  std::string message = fmt::format("{}: {}", what, status.error_message());
  // A gRPC code this side cannot send back as itself is kept in the text.
  if (GrpcCodeFor(code) != status.error_code()) {
    message += fmt::format(" (gRPC code {})", static_cast<int>(status.error_code()));
  }
  // gRPC's words for a request above the server's limit say nothing of why (grpc_server.h).
  const std::string& text = status.error_message();
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
      (text.rfind("Received message larger than max", 0) == 0 ||
       text.find("RST_STREAM with error code 11") != std::string::npos)) {
    message += ": the request is larger than the server accepts (its request limit)";
  }
  return Status(code, std::move(message));
}

}  // namespace dualpath
