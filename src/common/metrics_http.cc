#include "dualpath/common/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "dualpath/common/listen.h"
#include "dualpath/common/log.h"

namespace dualpath::metrics {
namespace {

// HOST:PORT split (HOST may be [v6]); false if malformed.
bool SplitHostPort(std::string_view addr, std::string* host, unsigned* port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view h = addr.substr(0, colon);
  const std::string_view p = addr.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), *port);
  if (p.empty() || ec != std::errc() || ptr != p.data() + p.size() || *port > 65535) return false;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty() || (h.find(':') != std::string_view::npos && addr.front() != '[')) return false;
  *host = std::string(h);
  return true;
}

bool ParseFd(std::string_view addr, int* fd) {
  if (addr.substr(0, 3) != "fd:") return false;
  const std::string_view n = addr.substr(3);
  auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), *fd);
  return !n.empty() && ec == std::errc() && ptr == n.data() + n.size() && *fd >= 3;
}

std::string SockNameOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return fmt::format("{}:{}", host, port);
  }
  auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
  // fmt rather than "[" + std::string(host) + ...: GCC 12 at -O3 (the Python wheel's build)
  // reports a false -Wrestrict on that concatenation.
  return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
}

// An inherited socket: it must be a listening stream socket; it is marked close-on-exec.
Result<int> AdoptFd(std::string_view addr, int fd) {
  int accepting = 0, type = 0;
  socklen_t len = sizeof accepting;
  socklen_t tlen = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 ||
      getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || accepting == 0 ||
      type != SOCK_STREAM) {
    return InvalidArgument("--metrics-addr " + std::string(addr) +
                           ": not an inherited listening TCP socket");
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

Result<int> BindAddr(std::string_view addr) {
  std::string host;
  unsigned port = 0;
  if (!SplitHostPort(addr, &host, &port)) {
    return InvalidArgument("--metrics-addr '" + std::string(addr) + "': expected HOST:PORT");
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    return InvalidArgument("--metrics-addr '" + std::string(addr) + "': " + gai_strerror(rc));
  }
  int fd = -1;
  int err = 0;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;  // a port in TIME_WAIT is free; SO_REUSEPORT stays off (listen.h)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) return fd;
  if (err == EADDRINUSE) return AddressInUse("metrics", addr, "port is taken");
  return ErrnoStatus("metrics: cannot listen on '" + std::string(addr) + "'", err);
}

std::string Response(int code, std::string_view reason, std::string_view type,
                     const std::string& body, bool head, std::string_view extra = "") {
  std::string out = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
  out += "Content-Type: " + std::string(type) + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += extra;
  out += "Connection: close\r\n\r\n";
  if (!head) out += body;
  return out;
}

std::string Error(int code, std::string_view reason, std::string_view extra = "") {
  return Response(code, reason, "text/plain; charset=utf-8",
                  std::to_string(code) + " " + std::string(reason) + "\n", false, extra);
}

}  // namespace

Result<int> ListenMetrics(std::string_view addr) { return BindAddr(addr); }

std::string BoundAddress(int fd) { return SockNameOf(fd); }

Status ValidateMetricsAddr(std::string_view flag, std::string_view addr) {
  int fd = 0;
  std::string host;
  unsigned port = 0;
  if (addr.substr(0, 3) == "fd:" ? ParseFd(addr, &fd) : SplitHostPort(addr, &host, &port)) {
    return Status::Ok();
  }
  return InvalidArgument(std::string(flag) + " '" + std::string(addr) +
                         "': expected HOST:PORT (port 0-65535) or fd:N (N >= 3)");
}

std::string HttpResponse(std::string_view request, const Registry& registry, bool* served_metrics) {
  *served_metrics = false;
  // Request line: METHOD SP TARGET SP HTTP/1.x (RFC 9112 §3).
  const size_t eol = request.find('\n');
  std::string_view line = request.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (eol == std::string_view::npos || sp1 == 0 || sp2 == std::string_view::npos ||
      sp2 == sp1 + 1 || line.find(' ', sp2 + 1) != std::string_view::npos ||
      line.substr(sp2 + 1, 7) != "HTTP/1." || line.size() != sp2 + 9) {
    return Error(400, "Bad Request");
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (method != "GET" && method != "HEAD") {
    return Error(405, "Method Not Allowed", "Allow: GET, HEAD\r\n");
  }
  target = target.substr(0, target.find('?'));  // Prometheus may add ?query parameters
  if (target != "/metrics") return Error(404, "Not Found");
  *served_metrics = true;
  return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", registry.Render(),
                  method == "HEAD");
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(std::string_view addr,
                                                            const Registry& registry) {
  RETURN_IF_ERROR(ValidateMetricsAddr("--metrics-addr", addr));
  int fd = -1;
  if (addr.substr(0, 3) == "fd:") {
    int n = -1;
    ParseFd(addr, &n);
    ASSIGN_OR_RETURN(fd, AdoptFd(addr, n));
  } else {
    ASSIGN_OR_RETURN(fd, BindAddr(addr));
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer(fd, SockNameOf(fd), registry));
  if (pipe2(s->wake_, O_CLOEXEC) != 0) return IoError("metrics: pipe2", errno);
  s->thread_ = std::thread([p = s.get()] { p->Serve(); });
  return s;
}

MetricsServer::MetricsServer(int fd, std::string address, const Registry& registry)
    : fd_(fd), address_(std::move(address)), registry_(registry) {}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const char b = 0;
    ssize_t ignored = write(wake_[1], &b, 1);
    (void)ignored;
    thread_.join();
  }
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
  close(fd_);
}

uint64_t MetricsServer::scrapes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scrapes_;
}

bool MetricsServer::WaitForScrape(Nanos timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t mark = ++mark_;
  return cv_.wait_for(lock, std::chrono::nanoseconds(timeout), [&] { return mark_seen_ >= mark; });
}

// One connection: its request as it arrives, then its response as it leaves.
struct MetricsServer::Conn {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;  // of the current phase (request or response)
  std::string in;
  std::string out;  // non-empty once the request is complete: the response
  size_t sent = 0;
  uint64_t mark = 0;     // mark_ when the request was complete (what this scrape has seen)
  bool metrics = false;  // a 200 to /metrics: counted as a scrape once sent in full
};

void MetricsServer::Serve() {
  // Non-blocking: a connection that the peer abandons between poll() and accept() must not block
  // the loop in accept (for an inherited socket the parent never accepts on it).
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  std::vector<Conn> conns;  // oldest first
  std::vector<pollfd> fds;
  auto close_all = [&] {
    for (Conn& c : conns) close(c.fd);
  };
  while (true) {
    fds.assign({{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}});
    auto now = std::chrono::steady_clock::now();
    auto next_deadline = std::chrono::steady_clock::time_point::max();
    for (const Conn& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    // Wake for the first deadline (rounded up: a connection is dropped once it has passed).
    const int timeout_ms =
        conns.empty()
            ? -1
            : static_cast<int>(std::max<int64_t>(
                  0, std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - now)
                             .count() +
                         1));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      log::Error("metrics: poll: {}", std::strerror(errno));
      close_all();
      return;
    }
    if (fds[1].revents != 0) {
      close_all();
      return;
    }
    now = std::chrono::steady_clock::now();
    // Connections first (indices match fds[2..]), then the new one, which may push out the oldest.
    std::vector<Conn> kept;
    kept.reserve(conns.size() + 1);
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      const short revents = fds[i + 2].revents;
      const bool alive = (revents == 0 || Step(c, revents)) && now < c.deadline;
      if (alive) {
        kept.push_back(std::move(c));
      } else {
        close(c.fd);
      }
    }
    conns = std::move(kept);
    if ((fds[0].revents & POLLIN) != 0) {
      const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn >= 0) {  // else the peer gave up before we accepted: nothing to answer
        if (conns.size() >= kMaxConnections) {
          close(conns.front().fd);  // the oldest has had the most time
          conns.erase(conns.begin());
        }
        Conn c;
        c.fd = conn;
        c.deadline = now + std::chrono::nanoseconds(kReadTimeout);
        conns.push_back(std::move(c));
      }
    }
  }
}

bool MetricsServer::Step(Conn& c, short revents) {
  if (c.out.empty()) {
    // Reading the request line and headers.
    char chunk[1024];
    const ssize_t n = recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (n <= 0) return false;  // closed or failed before a whole request: no one to answer
    c.in.append(chunk, static_cast<size_t>(n));
    if (c.in.find("\r\n\r\n") == std::string::npos && c.in.find("\n\n") == std::string::npos) {
      if (c.in.size() < kMaxRequestBytes) return true;
      c.out = Error(431, "Request Header Fields Too Large");
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        c.mark = mark_;  // this scrape renders every count made before now
      }
      c.out = HttpResponse(c.in, registry_, &c.metrics);
    }
    // The answer has its own deadline: a client that stops reading is dropped after it.
    c.deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kReadTimeout);
    revents = POLLOUT;  // try to send at once
  }
  if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return true;
  const ssize_t n =
      send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) return false;  // the client went away
  c.sent += static_cast<size_t>(n);
  if (c.sent < c.out.size()) return true;
  // Only a response sent in full counts as a scrape.
  if (c.metrics) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++scrapes_;
      mark_seen_ = std::max(mark_seen_, c.mark);
    }
    cv_.notify_all();
  }
  return false;
}

}  // namespace dualpath::metrics
