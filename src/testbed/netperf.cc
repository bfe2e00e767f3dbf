#include "dualpath/testbed/netperf.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <utility>
#include <vector>

#include "dualpath/common/listen.h"

namespace dualpath::testbed {
namespace {

Result<sockaddr_in> MakeAddr(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument(fmt::format("'{}' is not an IPv4 address", host));
  }
  return addr;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) {
      close(fd_);
    }
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

Result<BlastResult> Blast(const BlastOptions& o, const Clock& clock) {
  if (o.max_bytes == 0 && o.duration <= 0) {
    return InvalidArgument("blast: give a byte limit or a duration");
  }
  if (o.dscp < -1 || o.dscp > 63) {
    return InvalidArgument(fmt::format("blast: DSCP {} is not in 0..63", o.dscp));
  }
  ASSIGN_OR_RETURN(sockaddr_in addr, MakeAddr(o.host, o.port));
  const std::string peer = fmt::format("{}:{}", o.host, o.port);

  const Nanos connect_deadline = clock.Now() + o.connect_timeout;
  int fd = -1;
  while (true) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return IoError("blast: socket", errno);
    }
    if (o.dscp >= 0) {
      // The TOS byte carries DSCP in its upper 6 bits (ECN in the lower 2).
      const int tos = o.dscp << 2;
      if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) != 0) {
        const int e = errno;
        close(fd);
        return IoError("blast: setsockopt IP_TOS", e);
      }
    }
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      break;
    }
    const int e = errno;
    close(fd);
    // Refused: the sink may not be listening yet; retry until the deadline (readiness, not
    // timing: each attempt is a real connection attempt).
    if (e != ECONNREFUSED || clock.Now() >= connect_deadline) {
      return IoError(fmt::format("blast: connect {}", peer), e);
    }
    timespec pause{0, 10 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  Fd sock(fd);

  std::vector<char> buf(o.chunk_bytes, 0);
  BlastResult result;
  const Nanos start = clock.Now();
  while (true) {
    if (o.max_bytes != 0 && result.bytes >= o.max_bytes) {
      break;
    }
    if (o.duration > 0 && clock.Now() - start >= o.duration) {
      break;
    }
    size_t len = buf.size();
    if (o.max_bytes != 0) {
      len = std::min<uint64_t>(len, o.max_bytes - result.bytes);
    }
    const ssize_t n = send(sock.get(), buf.data(), len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return IoError(fmt::format("blast: send to {} after {} bytes", peer, result.bytes), errno);
    }
    result.bytes += static_cast<uint64_t>(n);
  }
  result.elapsed = clock.Now() - start;
  // Orderly close so the sink sees EOF after all data.
  shutdown(sock.get(), SHUT_WR);
  char drain[256];
  while (recv(sock.get(), drain, sizeof(drain), 0) > 0) {
  }
  return result;
}

Result<Sink> Sink::Listen(const std::string& bind_addr, uint16_t port) {
  ASSIGN_OR_RETURN(sockaddr_in addr, MakeAddr(bind_addr, port));
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    return IoError("sink: socket", errno);
  }
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == EADDRINUSE) {
      return AddressInUse("sink", fmt::format("{}:{}", bind_addr, port), "port taken");
    }
    return IoError(fmt::format("sink: bind {}:{}", bind_addr, port), errno);
  }
  if (listen(fd.get(), 16) != 0) {
    return IoError("sink: listen", errno);
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return IoError("sink: getsockname", errno);
  }
  return Sink(fd.release(), ntohs(addr.sin_port));
}

Sink::Sink(Sink&& other) noexcept : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}

Sink& Sink::operator=(Sink&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      close(fd_);
    }
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

Sink::~Sink() {
  if (fd_ >= 0) {
    close(fd_);
  }
}

Result<uint64_t> Sink::AcceptAndDrain() {
  int c = -1;
  do {
    c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  } while (c < 0 && errno == EINTR);
  if (c < 0) {
    return IoError("sink: accept", errno);
  }
  Fd conn(c);
  std::vector<char> buf(256 * 1024);
  uint64_t total = 0;
  while (true) {
    const ssize_t n = recv(conn.get(), buf.data(), buf.size(), 0);
    if (n > 0) {
      total += static_cast<uint64_t>(n);
    } else if (n == 0) {
      return total;
    } else if (errno != EINTR) {
      return IoError(fmt::format("sink: recv after {} bytes", total), errno);
    }
  }
}

}  // namespace dualpath::testbed
