// The one mapping between dualpath Status and grpc::Status, used by every gRPC server and client
// of ours: the scheduler service and its client library (dualpath/control/client.h), the engines'
// EnginePeer service and their calls to it (src/engine/peers.h adds that protocol's reading).
//
// One table pairs each dualpath code with the gRPC code it travels as (GrpcCodeFor) and each gRPC
// code with the dualpath code it reads as (CodeForGrpc). There are 17 gRPC codes and many more
// dualpath codes, so the table is many-to-one; what a code cannot carry travels in the text:
//   ToGrpc    the message alone when the dualpath code reads back as itself (kInvalidArgument ->
//             INVALID_ARGUMENT -> kInvalidArgument); Status::ToString(), which names the code,
//             when it does not (kEngineNoRoom -> RESOURCE_EXHAUSTED -> kResourceExhausted).
//   FromGrpc  "<what>: <gRPC message>", plus " (gRPC code N)" when the gRPC code is not the one
//             its dualpath code travels as (ABORTED -> kControlRpcError -> UNKNOWN).
// So a round trip keeps every code: in the code when the table pairs it both ways, in the text
// otherwise. grpc_status_test.cc checks both directions for every code.
//
// Thread safety: pure functions.
#pragma once

#include <grpcpp/support/status.h>

#include <string_view>

#include "dualpath/common/status.h"

namespace dualpath {

// The gRPC code a dualpath code travels as: the common codes as their gRPC namesakes (kTimeout ->
// DEADLINE_EXCEEDED, kCorruption -> DATA_LOSS, kControlRpcError -> UNKNOWN); a component's code
// as the common condition it is a case of (bad input -> INVALID_ARGUMENT, no space or room ->
// RESOURCE_EXHAUSTED, a store or peer that is gone -> UNAVAILABLE, ...); anything else INTERNAL.
grpc::StatusCode GrpcCodeFor(Code code);

// The dualpath code a gRPC code reads as: the namesake; UNKNOWN and ABORTED (no dualpath
// equivalent) read as kControlRpcError, UNAUTHENTICATED as kPermissionDenied; a value outside
// gRPC's table as kControlRpcError.
Code CodeForGrpc(grpc::StatusCode code);

// dualpath Status -> grpc::Status, for a server's reply (see the file comment for the message).
grpc::Status ToGrpc(const Status& status);

// grpc::Status -> dualpath Status, for a client; `what` names the call ("scheduler Fetch at
// unix:/run/dp/sched.sock"). OK gives Status::Ok(). gRPC's own refusal of a request above the
// server's limit (grpc_server.h: "Received message larger than max (N vs. M)", or the stream
// reset when the server's transport quota ran out) is kResourceExhausted with the reason added:
// "...: the request is larger than the server accepts (its request limit)".
Status FromGrpc(const grpc::Status& status, std::string_view what);

}  // namespace dualpath
