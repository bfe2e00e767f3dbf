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
// Note: gRPC itself removes the unix socket file at PATH when the server shuts down. Since a second
// server refuses instead of replacing the file, the file at PATH is this server's own then.
//
// Thread safety: a free function; the builder is the caller's.
#pragma once

#include <memory>
#include <string>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"

namespace grpc {
class Server;
class ServerBuilder;
}  // namespace grpc

namespace dualpath {

struct GrpcServerStart {
  std::unique_ptr<grpc::Server> server;
  // `listen` with port 0 replaced by the bound port (unix addresses unchanged).
  std::string address;
  int port = 0;  // the bound TCP port; 0 for unix sockets
};

// Adds `listen` (unix:PATH or HOST:PORT) to `builder` (services already registered) and starts it.
// `what` names the server in errors ("control", "EnginePeer"); `tls` is its transport security
// (grpc_tls.h): kInvalidArgument naming the flags for a TCP listener with neither a certificate
// nor `insecure`. kAlreadyExists "address in use"
// when another server holds the address; kFailedPrecondition when PATH is not a socket;
// kUnavailable when the bind failed otherwise; kIoError when the socket's mode cannot be set.
Result<GrpcServerStart> StartGrpcServer(grpc::ServerBuilder& builder, const std::string& what,
                                        const std::string& listen, const GrpcTls& tls);

}  // namespace dualpath
