#include "peer_auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

#include "dualpath/transfer/wire.h"

namespace dualpath::transfer {
namespace {

Result<std::string> Nonce() {
  std::string n(kAuthNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    return Internal("RAND_bytes failed for a transfer auth nonce");
  }
  return n;
}

// HMAC-SHA256(token, label | first | second).
std::string Proof(std::string_view token, std::string_view label, const std::string& first,
                  const std::string& second) {
  const std::string msg = std::string(label) + first + second;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // token.data() is never null (a string_view of a std::string), so an empty token is an empty
  // key, not "reuse the previous key".
  static const char kEmpty = 0;
  const void* key = token.empty() ? &kEmpty : token.data();
  HMAC(EVP_sha256(), key, static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

// Constant time in the proof's bytes: a peer probing for the token learns nothing from timing.
bool SameProof(const std::string& a, const std::string& b) {
  return a.size() == kAuthProofBytes && b.size() == kAuthProofBytes &&
         CRYPTO_memcmp(a.data(), b.data(), kAuthProofBytes) == 0;
}

// Tells the peer why (best effort: it may be gone) and returns the error for our side.
Status Refuse(ControlChannel& ch, std::string_view reason) {
  (void)ch.Send(EncodeRefused(reason));
  return PermissionDenied(fmt::format("refused transfer peer {}: {}", ch.PeerName(), reason));
}

// The peer's AUTH, or its refusal / a foreign message as kPermissionDenied.
Result<Auth> ReceiveAuth(ControlChannel& ch, Nanos timeout, std::string_view step) {
  ASSIGN_OR_RETURN(std::string frame,
                   ReceiveWithin(ch, timeout, fmt::format("{} from {}", step, ch.PeerName())));
  RETURN_IF_ERROR(RefusalIn(frame, ch.PeerName()));
  Result<Auth> auth = DecodeAuth(frame);
  if (!auth.ok()) {
    // A peer that skips the handshake (an older engine, a stray client) is refused, not parsed.
    return Refuse(ch, "no transfer token presented (" + auth.status().message() + ")");
  }
  return auth;
}

constexpr std::string_view kAcceptorLabel = "dualpath-transfer-v2 acceptor";
constexpr std::string_view kConnectorLabel = "dualpath-transfer-v2 connector";
constexpr std::string_view kWrongToken = "wrong transfer token";

}  // namespace

Result<std::string> ReceiveWithin(ControlChannel& ch, Nanos timeout, std::string_view what) {
  pollfd pfd{ch.PollFd(), POLLIN, 0};
  const int ms = static_cast<int>(std::max<Nanos>(1, timeout / kNanosPerMilli));
  int rc = 0;
  do {
    rc = ::poll(&pfd, 1, ms);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    return Status(Code::kTransferPeerDead, fmt::format("{}: no answer within {} ms", what, ms));
  }
  return ch.Receive();
}

Status RefusalIn(std::string_view frame, const std::string& peer) {
  Result<MsgType> type = CheckFrame(frame);
  if (!type.ok() || *type != MsgType::kRefused) return Status::Ok();
  Result<std::string> reason = DecodeRefused(frame);
  return PermissionDenied(fmt::format("transfer peer {} refused us: {}", peer,
                                      reason.ok() ? *reason : reason.status().message()));
}

Status AuthenticateConnector(ControlChannel& ch, std::string_view token, Nanos timeout) {
  ASSIGN_OR_RETURN(std::string mine, Nonce());
  RETURN_IF_ERROR(ch.Send(EncodeAuth(Auth{mine, ""})));
  ASSIGN_OR_RETURN(Auth theirs, ReceiveAuth(ch, timeout, "auth"));
  if (!SameProof(theirs.proof, Proof(token, kAcceptorLabel, mine, theirs.nonce))) {
    return Refuse(ch, std::string(kWrongToken));
  }
  return ch.Send(EncodeAuth(Auth{mine, Proof(token, kConnectorLabel, theirs.nonce, mine)}));
}

Status AuthenticateAcceptor(ControlChannel& ch, std::string_view token, Nanos timeout) {
  ASSIGN_OR_RETURN(Auth challenge, ReceiveAuth(ch, timeout, "auth challenge"));
  if (!challenge.proof.empty()) return Refuse(ch, "auth challenge carries a proof");
  ASSIGN_OR_RETURN(std::string mine, Nonce());
  RETURN_IF_ERROR(
      ch.Send(EncodeAuth(Auth{mine, Proof(token, kAcceptorLabel, challenge.nonce, mine)})));
  ASSIGN_OR_RETURN(Auth response, ReceiveAuth(ch, timeout, "auth response"));
  // The response must echo the connector's challenge nonce: a proof for another exchange does
  // not count.
  if (response.nonce != challenge.nonce ||
      !SameProof(response.proof, Proof(token, kConnectorLabel, mine, challenge.nonce))) {
    return Refuse(ch, std::string(kWrongToken));
  }
  return Status::Ok();
}

}  // namespace dualpath::transfer
