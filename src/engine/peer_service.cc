#include "engine/peer_service.h"

namespace dualpath::engine {

grpc::Status PeerService::Refusal() const {
  if (prefill_.load(std::memory_order_acquire)) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this engine is a prefill engine: EnginePeer calls go to decode engines");
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "engine not ready (not yet registered)");
}

grpc::Status PeerService::StartDecode(grpc::ServerContext*, const v1::StartDecodeRequest* req,
                                      v1::StartDecodeReply* reply) {
  Decoder* d = decoder_.load(std::memory_order_acquire);
  if (d == nullptr) {
    return Refusal();
  }
  Result<v1::StartDecodeReply> r = d->StartDecode(*req);
  if (!r.ok()) {
    return ToGrpc(r.status());
  }
  *reply = std::move(r).value();
  return grpc::Status::OK;
}

grpc::Status PeerService::PrefillDone(grpc::ServerContext*, const v1::PrefillDoneRequest* req,
                                      v1::PrefillDoneReply*) {
  Decoder* d = decoder_.load(std::memory_order_acquire);
  if (d == nullptr) {
    return Refusal();
  }
  return ToGrpc(d->PrefillDone(*req));
}

grpc::Status PeerService::AbortDecode(grpc::ServerContext*, const v1::AbortDecodeRequest* req,
                                      v1::AbortDecodeReply*) {
  Decoder* d = decoder_.load(std::memory_order_acquire);
  if (d == nullptr) {
    return Refusal();
  }
  return ToGrpc(d->AbortDecode(*req));
}

}  // namespace dualpath::engine
