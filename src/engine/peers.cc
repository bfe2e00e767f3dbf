#include "engine/peers.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_status.h"

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

namespace {

// gRPC 1.51 (Debian 12) runs callback-API completions (PeerProber's pings) on a process-wide
// "alternative" completion queue that the first channel using the callback API creates and the last
// one's destruction shuts down. Re-creating it while the old one's thread is still shutting it down
// double-frees inside gRPC (ASan: grpc_cq_internal_unref on its nexting thread, engine_test after
// the prober dropped and re-made channels). One channel that is never destroyed keeps a reference:
// made once, its one call (deadline already past) fails at once. The objects are kept reachable
// from statics on purpose (a leak checker does not count them).
void KeepCallbackQueue() {
  static std::shared_ptr<grpc::Channel>* channel = nullptr;
  static v1::EnginePeer::Stub* stub = nullptr;
  static grpc::ClientContext* ctx = nullptr;
  static v1::PingRequest* request = nullptr;
  static v1::PingReply* reply = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    channel = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        "unix:/nonexistent/dualpath-callback-queue-keeper", grpc::InsecureChannelCredentials()));
    stub = v1::EnginePeer::NewStub(*channel).release();
    ctx = new grpc::ClientContext;
    ctx->set_deadline(std::chrono::system_clock::now());
    request = new v1::PingRequest;
    reply = new v1::PingReply;
    stub->async()->Ping(ctx, request, reply, [](grpc::Status) {});
  });
}

}  // namespace

std::shared_ptr<v1::EnginePeer::Stub> PeerDirectory::Stub(const std::string& address) {
  KeepCallbackQueue();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stubs_.find(address);
  if (it != stubs_.end()) {
    return it->second;
  }
  // The channel settings every client of ours uses (common/grpc_channel.h): StartDecode carries
  // every prompt token id, and a dead peer must fail its requests promptly (reconnects back off to
  // at most 1 s, not minutes) so the scheduler re-submits them.
  auto channel = MakeChannel(address, tls_);
  auto stub = std::shared_ptr<v1::EnginePeer::Stub>(v1::EnginePeer::NewStub(channel));
  stubs_.emplace(address, stub);
  return stub;
}

void PeerDirectory::DropStub(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  stubs_.erase(address);
}

int PeerDirectory::CancelCalls(const std::string& address, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  auto [first, last] = calls_.equal_range(address);
  for (auto it = first; it != last; ++it) {
    if (!it->second->why_.empty()) continue;  // cancelled already
    it->second->why_ = why;
    // Non-blocking: the call's own thread sees CANCELLED and returns.
    it->second->ctx_.TryCancel();
    ++n;
  }
  return n;
}

int PeerDirectory::Disconnect(const std::string& addr_port, const std::string& why) {
  const size_t colon = addr_port.rfind(':');
  if (colon == std::string::npos || colon == 0) return 0;
  const std::string host = addr_port.substr(0, colon);
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(transfer_peers_,
                  [&](const auto& kv) { return kv.first.rfind(host + ":", 0) == 0; });
  }
  // Both directions: the peer we connected to (our puts) and the one that connected to us (its
  // puts into our buffers, e.g. a DE's pushes into a PE's area). Waits until both are closed.
  return transfer_.DisconnectHost(host, why);
}

PeerCall::PeerCall(PeerDirectory& dir, std::string address, grpc::ClientContext& ctx)
    : dir_(dir), address_(std::move(address)), ctx_(ctx) {
  std::lock_guard<std::mutex> lock(dir_.mu_);
  dir_.calls_.emplace(address_, this);
}

PeerCall::~PeerCall() {
  std::lock_guard<std::mutex> lock(dir_.mu_);
  auto [first, last] = dir_.calls_.equal_range(address_);
  for (auto it = first; it != last; ++it) {
    if (it->second == this) {
      dir_.calls_.erase(it);
      break;
    }
  }
}

std::string PeerCall::cancelled() const {
  std::lock_guard<std::mutex> lock(dir_.mu_);
  return why_;
}

Status FromGrpc(const grpc::Status& s, std::string_view what) {
  Status read = dualpath::FromGrpc(s, what);
  switch (read.code()) {
    case Code::kOk:
    case Code::kInvalidArgument:
    case Code::kTimeout:
      return read;
    case Code::kResourceExhausted:  // the DE refused: no room (or none in time) for the request
      return Status(Code::kEngineNoRoom, read.message());
    default: {
      // Down, refused, not there: the peer failed. Its gRPC code stays in the text (once: the
      // table's reading already keeps the codes it cannot carry).
      std::string msg = read.message();
      if (GrpcCodeFor(CodeForGrpc(s.error_code())) == s.error_code()) {
        msg += fmt::format(" (gRPC code {})", static_cast<int>(s.error_code()));
      }
      return Status(Code::kEnginePeerFailed, std::move(msg));
    }
  }
}

grpc::Status ToPeerGrpc(const Status& s) {
  if (s.code() == Code::kTimeout) {
    // The DE waited its share of the PE's deadline for buffer memory: a refusal (nothing was
    // started here), which the PE tells from a lost call by RESOURCE_EXHAUSTED (prefill.cc,
    // start_refused). The text names the real code, as the table does for codes it folds.
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, s.ToString());
  }
  return ToGrpc(s);
}

}  // namespace dualpath::engine
