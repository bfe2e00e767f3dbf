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

// Reads until the end of the headers, the size limit or the timeout. The raw bytes, or "" after
// a timeout or a closed connection; `too_big` when the limit was hit first.
std::string ReadRequest(int conn, bool* too_big) {
  std::string buf;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kReadTimeout);
  char chunk[1024];
  while (buf.find("\r\n\r\n") == std::string::npos && buf.find("\n\n") == std::string::npos) {
    if (buf.size() >= kMaxRequestBytes) {
      *too_big = true;
      return buf;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{conn, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
    const ssize_t n = recv(conn, chunk, sizeof chunk, 0);
    if (n <= 0) return "";
    buf.append(chunk, static_cast<size_t>(n));
  }
  return buf;
}

// True if every byte was sent.
bool SendAll(int conn, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(conn, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // the client went away (or SO_SNDTIMEO passed)
    off += static_cast<size_t>(n);
  }
  return true;
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

void MetricsServer::Serve() {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log::Error("metrics: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;  // the peer gave up before we accepted: nothing to answer
    Handle(conn);
    close(conn);
  }
}

void MetricsServer::Handle(int conn) {
  // A stalled reader cannot hold the server for longer than the read timeout either.
  timeval tv{static_cast<time_t>(kReadTimeout / kNanosPerSecond), 0};
  setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  bool too_big = false;
  const std::string request = ReadRequest(conn, &too_big);
  if (too_big) {
    (void)SendAll(conn, Error(431, "Request Header Fields Too Large"));
    return;
  }
  if (request.empty()) return;  // timed out or closed: no one to answer
  uint64_t mark;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mark = mark_;  // this scrape renders every count made before now
  }
  bool metrics = false;
  // Only a response sent in full counts as a scrape.
  if (!SendAll(conn, HttpResponse(request, registry_, &metrics)) || !metrics) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++scrapes_;
    mark_seen_ = std::max(mark_seen_, mark);
  }
  cv_.notify_all();
}

}  // namespace dualpath::metrics
