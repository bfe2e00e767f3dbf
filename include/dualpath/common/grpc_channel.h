// Client channels of ours: the one way a gRPC client here (the scheduler client library,
// dualpath/control/client.h; engines' EnginePeer stubs) reaches a server.
//
// Settings (DefaultChannelArgs):
//   - insecure: the services run inside the cluster's private networks (docs/e2e.md);
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

namespace dualpath {

grpc::ChannelArguments DefaultChannelArgs();

// A channel to "unix:PATH" or "HOST:PORT" with DefaultChannelArgs. Connects lazily (on the first
// call or wait) and reconnects by itself.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

}  // namespace dualpath
