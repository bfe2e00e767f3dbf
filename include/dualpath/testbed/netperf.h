// A minimal TCP load generator for the testbed: Blast sends as fast as the link allows, a Sink
// receives and discards. It measures what a compute link carries (with link counters) and lets
// the traffic-class work mark packets with a DSCP value (IP_TOS), which the --dscp priority tree
// on compute links classifies (docs/testbed.md). Exposed as `dualpath cluster sink|blast`, so it
// runs inside a node's namespace through `dualpath cluster exec`.
//
// Only ever connects to the address it is given; the testbed uses it with its own addresses.
//
// Thread safety: a Sink is used by one thread at a time; Blast may run on any thread.
#pragma once

#include <cstdint>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"

namespace dualpath::testbed {

struct BlastOptions {
  std::string host;  // IPv4 address
  uint16_t port = 0;
  uint64_t max_bytes = 0;  // stop after this many bytes (0: no limit)
  Nanos duration = 0;      // stop after this long (0: no limit); one of the two must be set
  int dscp = -1;           // 0..63 sets IP_TOS = dscp << 2; -1 leaves the default (0)
  size_t chunk_bytes = 256 * 1024;
  // Keeps retrying a refused connection this long, so a sink started just before is found
  // without the caller waiting for it.
  Nanos connect_timeout = 10 * kNanosPerSecond;
};

struct BlastResult {
  uint64_t bytes = 0;  // bytes written to the socket
  Nanos elapsed = 0;   // from connection established to the last write
};

// Connects and sends zeros until a limit is reached, then closes the connection.
Result<BlastResult> Blast(const BlastOptions& options, const Clock& clock);

class Sink {
 public:
  // Listens on bind_addr:port (port 0: any free port; see port()).
  static Result<Sink> Listen(const std::string& bind_addr, uint16_t port);
  Sink(Sink&& other) noexcept;
  Sink& operator=(Sink&& other) noexcept;
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;
  ~Sink();

  uint16_t port() const { return port_; }
  // Accepts one connection and reads until the peer closes it; returns the bytes received.
  Result<uint64_t> AcceptAndDrain();

 private:
  Sink(int fd, uint16_t port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace dualpath::testbed
