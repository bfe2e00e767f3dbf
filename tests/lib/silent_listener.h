// SilentListener: a TCP listener on 127.0.0.1 that never accepts nor answers, for tests of what a
// client does when its peer's host is unreachable (a link down). Connections within the backlog
// complete in the kernel and then hear nothing (a peer that died mid-connection looks the same);
// with a backlog of 0, every connection after the first gets its SYNs dropped (a host that never
// answers). The socket closes with the object.
//
// Thread safety: none needed (set up once, read-only afterwards).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace dualpath::net_testing {

class SilentListener {
 public:
  explicit SilentListener(int backlog) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        ::listen(fd_, backlog) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      return;  // ok() is false
    }
    address_ = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;

  bool ok() const { return !address_.empty(); }
  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"

 private:
  int fd_ = -1;
  std::string address_;
};

}  // namespace dualpath::net_testing
