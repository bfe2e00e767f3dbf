#include "engine/peer_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "dualpath/engine/engine.h"

namespace dualpath::engine {

void PeerService::SetPrefill(bool prefill) {
  std::lock_guard<std::mutex> lock(mu_);
  prefill_ = prefill;
}

void PeerService::SetDecoder(Decoder* decoder) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    decoder_ = decoder;
  }
  cv_.notify_all();
}

void PeerService::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    decoder_ = nullptr;
  }
  cv_.notify_all();
}

Decoder* PeerService::Get(grpc::ServerContext* ctx, grpc::Status* refusal) {
  std::unique_lock<std::mutex> lock(mu_);
  if (prefill_) {
    *refusal =
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                     "this engine is a prefill engine: EnginePeer calls go to decode engines");
    return nullptr;
  }
  auto limit =
      std::min(ctx->deadline(), std::chrono::system_clock::now() + std::chrono::seconds(30));
  cv_.wait_until(lock, limit, [&] { return closed_ || decoder_ != nullptr; });
  if (decoder_ == nullptr) {
    *refusal = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            closed_ ? "engine stopping" : "engine not ready (still starting)");
  }
  return decoder_;
}

grpc::Status PeerService::StartDecode(grpc::ServerContext* ctx, const v1::StartDecodeRequest* req,
                                      v1::StartDecodeReply* reply) {
  grpc::Status refusal;
  Decoder* d = Get(ctx, &refusal);
  if (d == nullptr) {
    return refusal;
  }
  Result<v1::StartDecodeReply> r = d->StartDecode(*req, [ctx] { return ctx->IsCancelled(); });
  if (!r.ok()) {
    return ToPeerGrpc(r.status());
  }
  *reply = std::move(r).value();
  return grpc::Status::OK;
}

grpc::Status PeerService::PrefillDone(grpc::ServerContext* ctx, const v1::PrefillDoneRequest* req,
                                      v1::PrefillDoneReply*) {
  grpc::Status refusal;
  Decoder* d = Get(ctx, &refusal);
  if (d == nullptr) {
    return refusal;
  }
  return ToPeerGrpc(d->PrefillDone(*req));
}

grpc::Status PeerService::AbortDecode(grpc::ServerContext* ctx, const v1::AbortDecodeRequest* req,
                                      v1::AbortDecodeReply* reply) {
  grpc::Status refusal;
  Decoder* d = Get(ctx, &refusal);
  if (d == nullptr) {
    return refusal;
  }
  Result<v1::AbortDecodeReply> r = d->AbortDecode(*req);
  if (!r.ok()) {
    return ToPeerGrpc(r.status());
  }
  *reply = std::move(r).value();
  return grpc::Status::OK;
}

grpc::Status PeerService::Ping(grpc::ServerContext*, const v1::PingRequest*, v1::PingReply*) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "engine closing");
  }
  return grpc::Status::OK;
}

Result<GrpcServerStart> StartPeerServer(PeerService& service, const std::string& listen,
                                        const GrpcTls& tls) {
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  // Refuses a port another server holds ("address in use"): gRPC would share it (SO_REUSEPORT).
  // StartDecode carries every prompt token id and block hash: bounded by kMaxPeerRequestBytes, and
  // a larger request is refused before it is parsed.
  return StartGrpcServer(builder, "EnginePeer", listen, tls, kMaxPeerRequestBytes);
}

}  // namespace dualpath::engine
