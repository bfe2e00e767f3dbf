#include "dualpath/transfer/control_channel.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>

#include "dualpath/common/listen.h"
#include "socket_tos.h"

namespace dualpath::transfer {
namespace {

Result<sockaddr_in> Resolve(const HostPort& hp) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp.port);
  if (hp.host.empty() || hp.host == "*") {
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    return sa;
  }
  if (inet_pton(AF_INET, hp.host.c_str(), &sa.sin_addr) == 1) {
    return sa;
  }
  // Names are resolved from /etc/hosts only in practice (no DNS in the testbed); AI_NUMERICSERV
  // keeps getaddrinfo from consulting services.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(hp.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return InvalidArgument(fmt::format("cannot resolve host '{}': {}", hp.host, gai_strerror(rc)));
  }
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return sa;
}

std::string Name(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
  return fmt::format("{}:{}", buf, ntohs(sa.sin_port));
}

Status WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Status(Code::kUnavailable, fmt::format("control channel send: {}", strerror(errno)));
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// OK, or kUnavailable at EOF / reset.
Status ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r == 0) {
      return Status(Code::kUnavailable, "control channel closed by peer");
    }
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Status(Code::kUnavailable, fmt::format("control channel recv: {}", strerror(errno)));
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

class TcpChannel final : public ControlChannel {
 public:
  TcpChannel(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  ~TcpChannel() override { ::close(fd_); }

  Status Send(std::string_view message) override {
    if (message.size() > kMaxControlMessage) {
      return InvalidArgument(fmt::format("control message of {} bytes exceeds {}", message.size(),
                                         kMaxControlMessage));
    }
    std::lock_guard<std::mutex> lock(send_mu_);
    auto len = static_cast<uint32_t>(message.size());
    RETURN_IF_ERROR(WriteAll(fd_, &len, sizeof len));
    return WriteAll(fd_, message.data(), message.size());
  }

  Result<std::string> Receive() override {
    uint32_t len = 0;
    RETURN_IF_ERROR(ReadAll(fd_, &len, sizeof len));
    if (len > kMaxControlMessage) {
      return Corruption(fmt::format("control message length {} from {} exceeds {}", len, peer_,
                                    kMaxControlMessage));
    }
    std::string msg(len, '\0');
    RETURN_IF_ERROR(ReadAll(fd_, msg.data(), len));
    return msg;
  }

  int PollFd() const override { return fd_; }
  std::string PeerName() const override { return peer_; }
  // shutdown (not close) wakes a thread blocked in recv/poll on this fd without freeing the fd
  // number while that thread may still use it.
  void Close() override { ::shutdown(fd_, SHUT_RDWR); }

 private:
  int fd_;
  std::string peer_;
  std::mutex send_mu_;
};

class TcpListener final : public ControlListener {
 public:
  TcpListener(int fd, std::string addr, int tos) : fd_(fd), addr_(std::move(addr)), tos_(tos) {}
  ~TcpListener() override { ::close(fd_); }

  Result<std::unique_ptr<ControlChannel>> Accept() override {
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    int fd = -1;
    do {
      fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      return Status(Code::kUnavailable, fmt::format("accept on {}: {}", addr_, strerror(errno)));
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (tos_ >= 0) {
      RETURN_IF_ERROR(SetSocketTos(fd, tos_));
    }
    return std::unique_ptr<ControlChannel>(new TcpChannel(fd, Name(sa)));
  }
  int PollFd() const override { return fd_; }
  std::string Address() const override { return addr_; }

 private:
  int fd_;
  std::string addr_;
  int tos_;
};

}  // namespace

Result<HostPort> ParseHostPort(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidArgument(fmt::format("address '{}' is not ADDR:PORT", text));
  }
  HostPort hp;
  hp.host = std::string(text.substr(0, colon));
  std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value > 65535) {
    return InvalidArgument(fmt::format("address '{}': port '{}' is not 0..65535", text, port));
  }
  hp.port = static_cast<uint16_t>(value);
  return hp;
}

Result<std::unique_ptr<ControlListener>> TcpListen(std::string_view addr_port, int tos) {
  ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(addr_port));
  ASSIGN_OR_RETURN(sockaddr_in sa, Resolve(hp));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return IoError("socket", errno);
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (tos >= 0) {
    if (Status s = SetSocketTos(fd, tos); !s.ok()) {
      ::close(fd);
      return s;
    }
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 64) != 0) {
    int e = errno;
    ::close(fd);
    // No SO_REUSEPORT: a second listener on a taken port fails here instead of sharing it.
    if (e == EADDRINUSE) {
      return AddressInUse("transfer listen", addr_port, "another server holds the port");
    }
    return Status(Code::kUnavailable, fmt::format("listen on {}: {}", addr_port, strerror(e)));
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return std::unique_ptr<ControlListener>(new TcpListener(fd, Name(sa), tos));
}

Result<std::unique_ptr<ControlChannel>> TcpConnect(std::string_view addr_port, int tos,
                                                   Nanos timeout) {
  ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(addr_port));
  ASSIGN_OR_RETURN(sockaddr_in sa, Resolve(hp));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return IoError("socket", errno);
  }
  if (tos >= 0) {
    if (Status s = SetSocketTos(fd, tos); !s.ok()) {
      ::close(fd);
      return s;
    }
  }
  // A blocking connect honours SO_SNDTIMEO (EINPROGRESS when it expires); cleared afterwards, so
  // the channel's own sends keep their semantics.
  auto send_timeout = [fd](Nanos t) {
    timeval tv{.tv_sec = static_cast<time_t>(t / kNanosPerSecond),
               .tv_usec = static_cast<suseconds_t>(t % kNanosPerSecond / 1000)};
    return ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  };
  if (timeout > 0 && send_timeout(timeout) != 0) {
    int e = errno;
    ::close(fd);
    return IoError("setsockopt SO_SNDTIMEO", e);
  }
  int rc = -1;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int e = errno;
    ::close(fd);
    return Status(Code::kTransferPeerDead,
                  e == EINPROGRESS || e == EAGAIN
                      ? fmt::format("connect to {}: no answer within {} ms", addr_port,
                                    timeout / kNanosPerMilli)
                      : fmt::format("connect to {}: {}", addr_port, strerror(e)));
  }
  if (timeout > 0) send_timeout(0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::unique_ptr<ControlChannel>(new TcpChannel(fd, Name(sa)));
}

}  // namespace dualpath::transfer
