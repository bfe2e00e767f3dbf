// The transport-security flags of every command that serves or calls gRPC over TCP (docs/cli.md
// "Security"): `control serve|engines|shutdown` and `engine`. The flags only collect paths; the
// rules and the loading are dualpath/common/grpc_tls.h's (LoadGrpcTls).
#pragma once

#include <CLI/CLI.hpp>

#include "dualpath/common/grpc_tls.h"

namespace dualpath::cli {

// Adds --tls-cert, --tls-key, --tls-ca and --insecure to `app`, filling `files`. `serves`: the
// help text speaks of a listener (server) rather than of a client.
void AddTlsFlags(CLI::App* app, GrpcTlsFiles* files, bool serves);

}  // namespace dualpath::cli
