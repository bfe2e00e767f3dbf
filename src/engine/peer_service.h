// PeerService: the EnginePeer gRPC service of one engine. It forwards to the engine's Decoder;
// until the engine has registered (the model is known) and on a prefill engine, every call is
// refused with UNAVAILABLE / FAILED_PRECONDITION naming why.
//
// Thread safety: gRPC calls handlers on its own threads; SetDecoder may be called once from any
// thread before or while calls arrive.
#pragma once

#include <atomic>

#include "dualpath/engine/v1/engine.grpc.pb.h"
#include "engine/decode.h"

namespace dualpath::engine {

class PeerService final : public v1::EnginePeer::Service {
 public:
  void SetDecoder(Decoder* decoder) { decoder_.store(decoder, std::memory_order_release); }
  void SetPrefill(bool prefill) { prefill_.store(prefill, std::memory_order_release); }

  grpc::Status StartDecode(grpc::ServerContext* ctx, const v1::StartDecodeRequest* req,
                           v1::StartDecodeReply* reply) override;
  grpc::Status PrefillDone(grpc::ServerContext* ctx, const v1::PrefillDoneRequest* req,
                           v1::PrefillDoneReply* reply) override;
  grpc::Status AbortDecode(grpc::ServerContext* ctx, const v1::AbortDecodeRequest* req,
                           v1::AbortDecodeReply* reply) override;

 private:
  grpc::Status Refusal() const;
  std::atomic<Decoder*> decoder_{nullptr};
  std::atomic<bool> prefill_{false};
};

}  // namespace dualpath::engine
