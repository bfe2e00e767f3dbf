// Private: the transfer engine's peer authentication (dualpath/transfer/token.h), run on a fresh
// control channel before the HELLOs:
//
//   connector -> acceptor   AUTH {nonce_c}                                   (challenge)
//   acceptor  -> connector  AUTH {nonce_a, HMAC(token, "acceptor"  | nonce_c | nonce_a)}
//   connector -> acceptor   AUTH {nonce_c, HMAC(token, "connector" | nonce_a | nonce_c)}
//   connector -> acceptor   HELLO ...                       (only after the acceptor's proof)
//
// Each side checks the other's proof (constant-time compare) and, on a mismatch, sends REFUSED
// with the reason and gives up: the connector sends its HELLO (worker addresses, remote keys) only
// to an acceptor that proved the token, and the acceptor reads a HELLO only from a connector that
// did. Different labels per direction keep an acceptor's proof from being replayed as a
// connector's.
//
// Thread safety: free functions on a channel the caller owns.
#pragma once

#include <string>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/transfer/control_channel.h"

namespace dualpath::transfer {

// The next message on `ch`, waiting at most `timeout`: kTransferPeerDead "<what>: no answer within
// N ms" when none came.
Result<std::string> ReceiveWithin(ControlChannel& ch, Nanos timeout, std::string_view what);

// kPermissionDenied naming the peer when it refused us (its reason) or did not prove the token;
// the channel's own errors otherwise.
Status AuthenticateConnector(ControlChannel& ch, std::string_view token, Nanos timeout);
Status AuthenticateAcceptor(ControlChannel& ch, std::string_view token, Nanos timeout);

// A REFUSED frame read where another message was expected: kPermissionDenied "transfer peer
// <peer> refused us: <reason>"; `frame` of another type: OK. Our own refusals read "refused
// transfer peer <peer>: <reason>" ("wrong transfer token", "no transfer token presented (...)").
Status RefusalIn(std::string_view frame, const std::string& peer);

}  // namespace dualpath::transfer
