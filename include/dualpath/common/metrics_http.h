// MetricsServer: the minimal HTTP/1.1 server behind every process's `--metrics-addr`: GET (or
// HEAD) /metrics answers 200 with Registry::Render() as text/plain; version=0.0.4; any other path
// 404, any other method 405, a malformed or oversized request 400 / 431. Each connection is
// closed after its response (Connection: close).
//
// Slow clients cannot hold the endpoint (docs/metrics.md): one thread serves up to
// kMaxConnections connections at once with non-blocking sockets and poll(2), so a scrape is
// answered while other connections send nothing; each connection has kReadTimeout to send its
// request and again to take its response, then it is dropped; and when all kMaxConnections are
// taken, a new connection makes the server drop the oldest one (the one that has had the most
// time), so however many connections clients open, the newest is always served.
//
// Addresses (docs/metrics.md):
//   HOST:PORT  bound here (IPv4, [IPv6] or a name; port 0 picks a free one), without
//              SO_REUSEPORT, so a taken port is refused ("address in use", as listen.h says);
//   fd:N       an inherited listening TCP socket (what `dualpath cluster run --metrics` hands its
//              children: bound by the orchestrator on the host's loopback, so Prometheus there
//              reaches engines that run inside the testbed's network namespaces).
//
// The last scrape: a process that exits at the end of its work would lose the counts since the
// last scrape. WaitForScrape() marks the end of the work and blocks until a scrape that *started
// after the mark* has been answered in full (counted, not slept), or the timeout passes.
//
// Ownership: owns the listening socket and the serving thread; the destructor stops and joins it.
// The registry must outlive the server. Thread safety: every method from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "dualpath/common/clock.h"
#include "dualpath/common/metrics.h"
#include "dualpath/common/status.h"

namespace dualpath::metrics {

inline constexpr size_t kMaxRequestBytes = 8192;            // request line + headers
inline constexpr Nanos kReadTimeout = 5 * kNanosPerSecond;  // per connection, and for the answer
inline constexpr size_t kMaxConnections = 32;               // served at once
// Longest `--metrics-wait-s` (how long a process waits for its last scrape).
inline constexpr double kMaxMetricsWaitS = 3600;

// Checks the form of a --metrics-addr value (HOST:PORT with PORT in [0, 65535], or fd:N with
// N >= 3); kInvalidArgument naming `flag` otherwise.
Status ValidateMetricsAddr(std::string_view flag, std::string_view addr);

// A listening TCP socket (close-on-exec) on HOST:PORT, bound as MetricsServer binds one: for a
// parent that binds and hands the socket to a child as fd:N. Errors as MetricsServer::Start.
Result<int> ListenMetrics(std::string_view addr);
// The HOST:PORT a socket is bound to ("[v6]:PORT" for IPv6).
std::string BoundAddress(int fd);

// The response to one raw request (exposed for tests): status line, headers and body.
std::string HttpResponse(std::string_view request, const Registry& registry, bool* served_metrics);

class MetricsServer {
 public:
  // Binds (or adopts) `addr` and starts serving `registry`. kInvalidArgument for a malformed
  // address or an fd that is not a listening TCP socket, kAlreadyExists for a taken port,
  // kUnavailable when the address cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> Start(std::string_view addr,
                                                      const Registry& registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound address as HOST:PORT (port resolved).
  const std::string& address() const { return address_; }
  // 200 responses to /metrics so far.
  uint64_t scrapes() const;
  // See the file comment: true if a scrape started after this call was served within `timeout`.
  bool WaitForScrape(Nanos timeout);

 private:
  struct Conn;
  MetricsServer(int fd, std::string address, const Registry& registry);
  void Serve();
  // Advances one connection after poll() reported `revents` on it; false when it is done (answered
  // in full, failed or closed by the client) and must be closed.
  bool Step(Conn& c, short revents);

  const int fd_;
  const std::string address_;
  const Registry& registry_;
  int wake_[2] = {-1, -1};  // a pipe: a byte written ends Serve()
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t scrapes_ = 0;    // guarded by mu_
  uint64_t mark_ = 0;       // WaitForScrape calls so far; guarded by mu_
  uint64_t mark_seen_ = 0;  // the largest mark_ a completed scrape had seen at its start
  std::thread thread_;
};

}  // namespace dualpath::metrics
