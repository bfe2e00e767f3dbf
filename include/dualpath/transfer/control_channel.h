// ControlChannel: the small message channel two transfer engines use to exchange worker
// addresses and remote keys before any one-sided operation.
//
// The engine depends only on this interface, so the later control plane (gRPC) can carry the
// same messages. The TCP implementation here frames each message with a 4-byte length and marks
// its socket with the high class's DSCP (control traffic is latency-critical).
//
// Ownership: a ControlListener owns its listening socket, a ControlChannel its connection.
// Thread safety: Send may be called from any thread (serialised inside); Receive from one thread
// at a time. Close() may be called from any thread and makes a blocked Receive return.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"

namespace dualpath::transfer {

inline constexpr size_t kMaxControlMessage = 64 * 1024 * 1024;

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  virtual Status Send(std::string_view message) = 0;
  // Blocks for the next message. kUnavailable when the peer closed the channel.
  virtual Result<std::string> Receive() = 0;
  // A descriptor that becomes readable when Receive would not block (for poll()).
  virtual int PollFd() const = 0;
  virtual std::string PeerName() const = 0;
  virtual void Close() = 0;
};

class ControlListener {
 public:
  virtual ~ControlListener() = default;
  virtual Result<std::unique_ptr<ControlChannel>> Accept() = 0;
  virtual int PollFd() const = 0;
  // "ADDR:PORT" actually bound (port 0 in Listen picks a free one).
  virtual std::string Address() const = 0;
};

// "ADDR:PORT" (IPv4 dotted quad or a host name resolvable without network, e.g. localhost).
// InvalidArgument naming the text when malformed.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
Result<HostPort> ParseHostPort(std::string_view text);

// TCP. `tos` (IP_TOS byte, -1 for none) marks the sockets.
Result<std::unique_ptr<ControlListener>> TcpListen(std::string_view addr_port, int tos);
// `timeout` > 0 bounds the connect (SO_SNDTIMEO on the blocking connect): a peer whose host is
// unreachable (its link down: SYNs unanswered) fails with kTransferPeerDead after it instead of
// after the kernel's SYN retries (~2 minutes). 0: the kernel's bound.
Result<std::unique_ptr<ControlChannel>> TcpConnect(std::string_view addr_port, int tos,
                                                   Nanos timeout = 0);

}  // namespace dualpath::transfer
