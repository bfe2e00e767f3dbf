// PeerDirectory: an engine's connections to other engines, by address: the transfer engine peer
// (one-sided puts, notices) and the EnginePeer gRPC stub. Connections are made lazily on first
// use and cached; a transfer peer the engine has declared dead is reconnected on the next use
// (a restarted engine on the same address is a new peer).
//
// When the engine's prober (peer_probe.h) finds another engine unreachable over the compute
// network, it uses the directory to let go of it: CancelCalls ends the EnginePeer calls in
// progress to it (each registered by a PeerCall; otherwise they would wait out their deadline,
// the request timeout), DropStub makes the next call open a new connection (the old one may sit
// in TCP's retransmission backoff long after the link is back), and Disconnect declares its
// transfer peers dead, both directions (their batches fail now, and nothing of them lands in our
// buffers any more).
//
// Thread safety: all methods may be called from any thread. Connect may block for the transfer
// handshake (control plane); it never holds the directory's lock while doing so.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/engine/v1/engine.grpc.pb.h"
#include "dualpath/transfer/engine.h"

namespace dualpath::engine {

class PeerCall;

class PeerDirectory {
 public:
  // `tls`: the EnginePeer clients' transport security (the engine's own certificate and CA).
  PeerDirectory(transfer::TransferEngine& transfer, GrpcTls tls)
      : transfer_(transfer), tls_(std::move(tls)) {}

  // The live transfer peer at `addr_port`, connecting if needed. kEnginePeerFailed naming the
  // address if the handshake fails.
  Result<transfer::PeerId> Transfer(const std::string& addr_port);
  // True while the transfer engine considers `peer` alive.
  bool Alive(transfer::PeerId peer) const;
  // The EnginePeer stub for a gRPC address (channels reconnect by themselves).
  std::shared_ptr<v1::EnginePeer::Stub> Stub(const std::string& address);
  // The next Stub(address) opens a new channel; calls holding the old stub keep it.
  void DropStub(const std::string& address);
  // Cancels every call to `address` registered by a PeerCall now (TryCancel), noting `why` in
  // each. Returns how many.
  int CancelCalls(const std::string& address, const std::string& why);
  // Declares every transfer peer on `addr_port`'s host dead, whichever side connected
  // (TransferEngine::DisconnectHost), and forgets the cached ones: the next Transfer connects
  // anew. Returns once their endpoints are closed (nothing of them lands in our buffers after
  // that), with how many there were.
  int Disconnect(const std::string& addr_port, const std::string& why);

 private:
  friend class PeerCall;
  transfer::TransferEngine& transfer_;
  const GrpcTls tls_;
  std::mutex mu_;
  std::map<std::string, transfer::PeerId> transfer_peers_;              // guarded by mu_
  std::map<std::string, std::shared_ptr<v1::EnginePeer::Stub>> stubs_;  // guarded by mu_
  std::multimap<std::string, PeerCall*> calls_;                         // guarded by mu_
};

// An EnginePeer call in progress to `address`, registered for its lifetime so that
// PeerDirectory::CancelCalls can end it. Declare it after the grpc::ClientContext it guards (it
// must be unregistered before the context goes).
class PeerCall {
 public:
  PeerCall(PeerDirectory& dir, std::string address, grpc::ClientContext& ctx);
  ~PeerCall();
  PeerCall(const PeerCall&) = delete;
  PeerCall& operator=(const PeerCall&) = delete;
  // Why CancelCalls cancelled the call (empty: it did not).
  std::string cancelled() const;

 private:
  friend class PeerDirectory;
  PeerDirectory& dir_;
  const std::string address_;
  grpc::ClientContext& ctx_;
  std::string why_;  // guarded by dir_.mu_
};

// The EnginePeer protocol's reading of the one Status <-> gRPC table (common/grpc_status.h).
//
// PE side, a failed call to a DE: bad input (kInvalidArgument) and a timeout (kTimeout) are what
// the table reads; RESOURCE_EXHAUSTED is kEngineNoRoom (the DE has no room for the request); any
// other failure means the peer failed: kEnginePeerFailed, the gRPC code kept in the text
// ("StartDecode at d0.0 (10.0.0.2:7000): ... (gRPC code 14)").
Status FromGrpc(const grpc::Status& s, std::string_view what);
// DE side, a handler's reply: the table, except that kTimeout (no buffer memory within the wait)
// is a refusal, RESOURCE_EXHAUSTED, like kEngineNoRoom: the PE releases nothing at the DE for a
// call the DE refused.
grpc::Status ToPeerGrpc(const Status& s);

}  // namespace dualpath::engine
