#include "engine/peers.h"

#include <fmt/format.h>

#include <algorithm>

namespace dualpath::engine {

Result<transfer::PeerId> PeerDirectory::Transfer(const std::string& addr_port) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = transfer_peers_.find(addr_port);
    if (it != transfer_peers_.end()) {
      if (Alive(it->second)) {
        return it->second;
      }
      transfer_peers_.erase(it);
    }
  }
  Result<transfer::PeerId> id = transfer_.Connect(addr_port);
  if (!id.ok()) {
    return Status(Code::kEnginePeerFailed,
                  fmt::format("transfer connect to {}: {}", addr_port, id.status().ToString()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Two threads may have connected at once: keep the first, the second peer just idles.
  auto [it, inserted] = transfer_peers_.emplace(addr_port, *id);
  return it->second;
}

bool PeerDirectory::Alive(transfer::PeerId peer) const {
  std::vector<transfer::PeerId> live = transfer_.Peers();
  return std::find(live.begin(), live.end(), peer) != live.end();
}

std::shared_ptr<v1::EnginePeer::Stub> PeerDirectory::Stub(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stubs_.find(address);
  if (it != stubs_.end()) {
    return it->second;
  }
  grpc::ChannelArguments args;
  // Fail fast on a dead peer instead of waiting out the default reconnect backoff (which grows to
  // minutes): a failed peer must fail its requests promptly so the scheduler re-submits them.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(-1);  // StartDecode carries every prompt token id
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  auto stub = std::shared_ptr<v1::EnginePeer::Stub>(v1::EnginePeer::NewStub(channel));
  stubs_.emplace(address, stub);
  return stub;
}

Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) {
    return Status::Ok();
  }
  std::string msg = fmt::format("{}: {}", what, s.error_message());
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Timeout(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return Status(Code::kEngineNoRoom, msg);
    case grpc::StatusCode::INVALID_ARGUMENT:
      return InvalidArgument(msg);
    default:
      return Status(Code::kEnginePeerFailed,
                    fmt::format("{} (gRPC code {})", msg, static_cast<int>(s.error_code())));
  }
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) {
    return grpc::Status::OK;
  }
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case Code::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Code::kEngineNoRoom:
    case Code::kTimeout:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case Code::kEngineStopped:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case Code::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    default:
      break;
  }
  return grpc::Status(code, s.ToString());
}

}  // namespace dualpath::engine
