// Starting a gRPC server on one address under the listening rules of listen.h: the one way our
// gRPC servers (the control service, engines' EnginePeer service) bind.
//
// gRPC sets SO_REUSEPORT on TCP listeners by default, so a second server on a taken port binds too
// and the kernel splits connections between them; and on unix:PATH it unlinks whatever socket is
// at PATH before binding, taking a live server's address over. StartGrpcServer refuses a live
// unix socket before gRPC touches the path (CheckListenAddress), turns SO_REUSEPORT off, and turns
// a failed bind into "address in use" when that is the cause.
//
// A unix socket file is created owner-only (mode 0600; the umask is tightened around the bind, so
// there is no moment with a wider mode): only the user the server runs as (and root) can connect.
//
// A TCP listener is TLS (mutual TLS with a CA) or, with GrpcTls::insecure, plaintext with a
// warning; with neither it is refused before anything binds (grpc_tls.h has the rules).
//
// Bounded requests: every server states the largest request it accepts (`max_receive_bytes`,
// worked out from its protocol and batch limits and documented beside the protocol). gRPC refuses
// a larger message with RESOURCE_EXHAUSTED "Received message larger than max (N vs. M)" before it
// is parsed. gRPC's HTTP/2 transport buffers a message whole before that check, so each server
// also gets a memory quota on its transport buffers (ResourceQuota, kGrpcQuotaFactor x the limit
// plus kGrpcQuotaSlackBytes, shared by all its connections): a request far above the limit is
// cancelled (RST_STREAM ENHANCE_YOUR_CALM, which the client sees as RESOURCE_EXHAUSTED) once the
// quota is spent, so it costs the server at most about the quota of transient memory, whatever
// its size. Legitimate traffic, a handful of requests at the limit at once, stays well inside it.
//
// Note: gRPC itself removes the unix socket file at PATH when the server shuts down. Since a second
// server refuses instead of replacing the file, the file at PATH is this server's own then.
//
// Thread safety: a free function; the builder is the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"

namespace grpc {
class Server;
class ServerBuilder;
}  // namespace grpc

namespace dualpath {

// The transport quota of a server whose requests are at most L bytes: kGrpcQuotaFactor * L +
// kGrpcQuotaSlackBytes (GrpcTransportQuota).
inline constexpr int64_t kGrpcQuotaFactor = 1;
inline constexpr int64_t kGrpcQuotaSlackBytes = int64_t{32} << 20;
// Largest limit a server may state: gRPC's limits are ints.
inline constexpr int64_t kGrpcMaxReceiveLimit = int64_t{1} << 30;
int64_t GrpcTransportQuota(int64_t max_receive_bytes);

struct GrpcServerStart {
  std::unique_ptr<grpc::Server> server;
  // `listen` with port 0 replaced by the bound port (unix addresses unchanged).
  std::string address;
  int port = 0;  // the bound TCP port; 0 for unix sockets
};

// Adds `listen` (unix:PATH or HOST:PORT) to `builder` (services already registered) and starts it.
// `what` names the server in errors ("control", "EnginePeer"); `tls` is its transport security
// (grpc_tls.h): kInvalidArgument naming the flags for a TCP listener with neither a certificate
// nor `insecure`; `max_receive_bytes` (1 .. kGrpcMaxReceiveLimit, else kInvalidArgument) its
// largest request, applied with the transport quota as the file comment says. kAlreadyExists
// "address in use" when another server holds the address; kFailedPrecondition when PATH is not a
// socket; kUnavailable when the bind failed otherwise; kIoError when the socket's mode cannot be
// set.
Result<GrpcServerStart> StartGrpcServer(grpc::ServerBuilder& builder, const std::string& what,
                                        const std::string& listen, const GrpcTls& tls,
                                        int64_t max_receive_bytes);

}  // namespace dualpath
