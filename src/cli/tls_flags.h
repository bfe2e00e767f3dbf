// The transport-security flags of every command that serves or calls gRPC over TCP (docs/cli.md
// "Security"): `control serve|engines|shutdown`, `engine` and `store master|node|bench|stats`. The
// flags only collect paths; the rules and the loading are dualpath/common/grpc_tls.h's
// (LoadGrpcTls, LoadGrpcTlsOr).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "dualpath/common/grpc_tls.h"

namespace dualpath::cli {

// Adds --tls-cert, --tls-key, --tls-ca and --insecure to `app`, filling `files`. `serves`: the
// help text speaks of a listener (server) rather than of a client.
void AddTlsFlags(CLI::App* app, GrpcTlsFiles* files, bool serves);

// Adds the options towards one kind of peer: --<peer>-tls-cert, --<peer>-tls-key, --<peer>-tls-ca
// and --<peer>-insecure (peer "etcd": --etcd-tls-cert ...), filling `files` (and its flag_prefix,
// so messages name these flags). `whom` completes the help text ("etcd", "the masters"). Given none
// of them, the command uses its --tls-* / --insecure instead (LoadGrpcTlsOr): in a cluster one
// certificate serves and calls.
void AddPeerTlsFlags(CLI::App* app, GrpcTlsFiles* files, const std::string& peer,
                     const std::string& whom);

}  // namespace dualpath::cli
