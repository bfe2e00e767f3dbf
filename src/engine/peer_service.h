// PeerService: the EnginePeer gRPC service of one engine. It forwards to the engine's Decoder.
// The server starts before the engine registers (its address goes into the registration), and the
// scheduler may hand a PE work for this DE the moment it registers, before the model and store are
// ready: calls arriving in that window wait (bounded) for the Decoder instead of failing. On a
// prefill engine, or once the engine closes, calls are refused naming why. Ping, the data-network
// probe, is answered by both roles.
//
// Thread safety: gRPC calls handlers on its own threads; SetDecoder and Close may be called from
// any thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "dualpath/common/grpc_server.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/engine/v1/engine.grpc.pb.h"
#include "engine/decode.h"

namespace dualpath::engine {

class PeerService final : public v1::EnginePeer::Service {
 public:
  void SetPrefill(bool prefill);
  void SetDecoder(Decoder* decoder);
  // Refuses every later call and wakes calls waiting for the Decoder.
  void Close();

  grpc::Status StartDecode(grpc::ServerContext* ctx, const v1::StartDecodeRequest* req,
                           v1::StartDecodeReply* reply) override;
  grpc::Status PrefillDone(grpc::ServerContext* ctx, const v1::PrefillDoneRequest* req,
                           v1::PrefillDoneReply* reply) override;
  grpc::Status AbortDecode(grpc::ServerContext* ctx, const v1::AbortDecodeRequest* req,
                           v1::AbortDecodeReply* reply) override;
  // The data-network probe (peer_probe.h): answered by every engine, prefill or decode, starting
  // or not, at once; only a closed engine refuses it (it is going away).
  grpc::Status Ping(grpc::ServerContext* ctx, const v1::PingRequest* req,
                    v1::PingReply* reply) override;

 private:
  // The Decoder, waiting up to the call's deadline (at most 30 s) while the engine is starting;
  // nullptr with *refusal set otherwise.
  Decoder* Get(grpc::ServerContext* ctx, grpc::Status* refusal);

  std::mutex mu_;
  std::condition_variable cv_;
  Decoder* decoder_ = nullptr;  // guarded by mu_
  bool prefill_ = false;        // guarded by mu_
  bool closed_ = false;         // guarded by mu_
};

// Serves `service` on `listen` (StartGrpcServer: address rules, `tls`) with the EnginePeer request
// limit (engine.h: kMaxPeerRequestBytes): the one way an engine starts its EnginePeer server.
Result<GrpcServerStart> StartPeerServer(PeerService& service, const std::string& listen,
                                        const GrpcTls& tls);

}  // namespace dualpath::engine
