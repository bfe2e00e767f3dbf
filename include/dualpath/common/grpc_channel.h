// Client channels of ours: the one way a gRPC client here (the scheduler client library,
// dualpath/control/client.h; engines' EnginePeer stubs) reaches a server.
//
// Settings (DefaultChannelArgs):
//   - transport security per grpc_tls.h: none on unix sockets (owner-only files), TLS (mutual
//     with a client certificate) on TCP, plaintext only with GrpcTls::insecure;
//   - no message size limits: an assignment or a StartDecode carries every prompt token id
//     (hundreds of KiB for a long agentic prompt; gRPC's default receive limit is 4 MiB);
//   - reconnects after 100 ms, backing off to at most 1 s (gRPC's default: 1 s growing to
//     120 s): a server that starts after its clients (the service after the engines, `cluster
//     run` waiting for the service's socket) is reached promptly, and a call to a peer that died
//     fails promptly instead of waiting out a long backoff.
//
// Thread safety: pure functions; a channel is thread-safe (gRPC).
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "dualpath/common/grpc_tls.h"

namespace dualpath {

grpc::ChannelArguments DefaultChannelArgs();

// A channel to "unix:PATH" or "HOST:PORT" with DefaultChannelArgs and `tls`'s credentials
// (GrpcChannelCredentials). Connects lazily (on the first call or wait) and reconnects by itself;
// a TLS handshake the server refuses (no or a wrong client certificate) fails the calls with
// UNAVAILABLE.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const GrpcTls& tls);

}  // namespace dualpath
