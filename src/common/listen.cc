#include "dualpath/common/listen.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace dualpath {
namespace {

// Does a server accept connections on the unix socket at `path`? true/false, or an error status.
Result<bool> UnixSocketLive(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) {
    return InvalidArgument("unix socket path longer than " +
                           std::to_string(sizeof sa.sun_path - 1) + " bytes: " + path);
  }
  std::memcpy(sa.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError("socket", errno);
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (rc == 0) return true;
  // ECONNREFUSED: nobody listens (the server died and left its file). EAGAIN: a live server whose
  // backlog is full: still a live server.
  if (err == ECONNREFUSED) return false;
  if (err == EAGAIN) return true;
  return IoError("connect to " + path, err);
}

Status CheckUnix(std::string_view listen, const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return IoError("listen on " + std::string(listen) + ": stat " + path, errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPrecondition("listen on " + std::string(listen) + ": " + path +
                              " exists and is not a socket; not replaced");
  }
  ASSIGN_OR_RETURN(bool live, UnixSocketLive(path));
  if (live) return AddressInUse("listen", listen, "a server is listening on " + path);
  return Status::Ok();
}

Status CheckTcp(std::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos) return Status::Ok();
  std::string host(listen.substr(0, colon));
  const std::string_view port_text = listen.substr(colon + 1);
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return Status::Ok();
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "*") host = "::";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    return Status::Ok();  // the server's own bind reports a bad host
  }
  Status out;
  for (addrinfo* a = res; a != nullptr && out.ok(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR as our servers set it: a port in TIME_WAIT is free, a listening one is not.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) {
      out = AddressInUse("listen", listen, "port " + std::to_string(port) + " is taken");
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

std::string UnixSocketPath(std::string_view listen) {
  if (listen.rfind("unix://", 0) == 0) return std::string(listen.substr(7));
  if (listen.rfind("unix:", 0) == 0) return std::string(listen.substr(5));
  return "";
}

Status AddressInUse(std::string_view what, std::string_view listen, std::string_view detail) {
  return AlreadyExists(std::string(what) + " on " + std::string(listen) + ": address in use (" +
                       std::string(detail) + ")");
}

Status CheckListenAddress(std::string_view listen) {
  const std::string path = UnixSocketPath(listen);
  if (!path.empty()) return CheckUnix(listen, path);
  if (listen.rfind("unix", 0) == 0) return Status::Ok();  // unix-abstract: etc.: gRPC's to judge
  return CheckTcp(listen);
}

Status ListenFailure(std::string_view what, std::string_view listen) {
  Status s = CheckListenAddress(listen);
  if (!s.ok()) return s.WithContext(what);
  return Unavailable(std::string(what) + ": cannot listen on '" + std::string(listen) + "'");
}

}  // namespace dualpath
