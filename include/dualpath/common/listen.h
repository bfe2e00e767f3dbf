// Listening addresses: one rule for every server of ours (the control service, engines' EnginePeer
// service, the transfer engine's control channel, the testbed's netperf sink): a second server on
// an address that a live server holds refuses to start ("address in use") instead of taking the
// address over, and a server never removes a socket file that is not its own.
//
//   unix:PATH   a socket file that answers connect() belongs to a live server: refuse. One that
//               refuses connections (ECONNREFUSED) is stale (its server died): it may be replaced.
//               Anything at PATH that is not a socket is refused and left alone.
//   HOST:PORT   bound without SO_REUSEPORT (gRPC sets it by default; StartGrpcServer turns it off),
//               so the kernel refuses a second bind with EADDRINUSE. Port 0 picks a free port.
//
// Thread safety: free functions, callable from any thread.
#pragma once

#include <string>
#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath {

// For unix:PATH (also unix://PATH): Ok if PATH is free or a stale socket; kAlreadyExists
// "address in use" if a server answers there; kFailedPrecondition if PATH is not a socket.
// For HOST:PORT with a port other than 0: kAlreadyExists if binding it (as our servers do, without
// SO_REUSEPORT) fails with EADDRINUSE. Anything else (port 0, an unparsable address): Ok, left to
// the server's own bind to report.
Status CheckListenAddress(std::string_view listen);

// The status for a server that could not bind `listen`: "address in use" (kAlreadyExists) if
// CheckListenAddress says so now, else kUnavailable "cannot listen on LISTEN".
Status ListenFailure(std::string_view what, std::string_view listen);

// The kAlreadyExists status every server reports for a taken address.
Status AddressInUse(std::string_view what, std::string_view listen, std::string_view detail);

// The path of a unix:PATH / unix://PATH address, "" for anything else.
std::string UnixSocketPath(std::string_view listen);

}  // namespace dualpath
