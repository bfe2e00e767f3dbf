// metrics::MetricsServer over real sockets: GET /metrics, 404, 405, 400, 431, HEAD, an inherited
// listening socket (fd:N), bad addresses, a taken port, and the last-scrape wait.
#include "dualpath/common/metrics_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

namespace dualpath::metrics {
namespace {

// A TCP connection to `address` (127.0.0.1:PORT); alone, a client that sends nothing (a slow or
// stuck one).
int Connect(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// One request over a fresh connection; the whole response (the server closes after it).
std::string Exchange(const std::string& address, const std::string& request) {
  const int fd = Connect(address);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// Whether the server still holds the connection: a non-blocking read finds nothing yet (EAGAIN),
// not the end of the stream that the server's close produces.
bool StillOpen(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    group_ = std::make_unique<Group>(registry_);
    group_->Counter("dp_test_total", "A test counter.", {"k"}).With({"v"}).Inc(7);
    auto s = MetricsServer::Start("127.0.0.1:0", registry_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  Registry registry_;
  std::unique_ptr<Group> group_;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesMetrics) {
  const std::string r = Exchange(server_->address(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const std::string body =
      "# HELP dp_test_total A test counter.\n# TYPE dp_test_total counter\n"
      "dp_test_total{k=\"v\"} 7\n";
  EXPECT_NE(r.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), body);
  EXPECT_EQ(server_->scrapes(), 1u);
}

TEST_F(MetricsServerTest, QueryStringAndHead) {
  EXPECT_EQ(
      Exchange(server_->address(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0),
      0u);
  const std::string head = Exchange(server_->address(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");  // no body
}

TEST_F(MetricsServerTest, ErrorsAndNothingCounted) {
  EXPECT_EQ(Exchange(server_->address(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange(server_->address(), "GET /metricsx HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0),
            0u);
  const std::string post = Exchange(server_->address(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos);
  for (const char* bad : {"GET\r\n\r\n", "GET /metrics\r\n\r\n", "GET /metrics FTP/1.1\r\n\r\n",
                          "GET  /metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1 x\r\n\r\n"}) {
    EXPECT_EQ(Exchange(server_->address(), bad).rfind("HTTP/1.1 400", 0), 0u) << bad;
  }
  const std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(2 * kMaxRequestBytes, 'a');
  EXPECT_EQ(Exchange(server_->address(), huge).rfind("HTTP/1.1 431", 0), 0u);
  EXPECT_EQ(server_->scrapes(), 0u);
  // The server still answers after all that.
  EXPECT_EQ(Exchange(server_->address(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

TEST_F(MetricsServerTest, WaitForScrapeNeedsAScrapeAfterTheMark) {
  // A scrape served before the mark does not count.
  Exchange(server_->address(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_FALSE(server_->WaitForScrape(0));
  // One served after the mark ends the wait: scrape (real requests) until the waiter returns;
  // the first scrape that starts after its mark releases it.
  std::atomic<bool> done{false};
  bool served = false;
  std::thread waiter([&] {
    served = server_->WaitForScrape(60 * kNanosPerSecond);
    done.store(true);
  });
  while (!done.load()) Exchange(server_->address(), "GET /metrics HTTP/1.1\r\n\r\n");
  waiter.join();
  EXPECT_TRUE(served);
}

// Issue 25 item 7: the server used to take one connection at a time, each for up to its read
// timeout, so N clients that connect and send nothing put every scrape N x 5 s behind them (and it
// was answered only after each of them had been timed out and closed).
TEST_F(MetricsServerTest, AnswersAScrapeWhileSlowClientsHoldConnections) {
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(Connect(server_->address()));
  const std::string r = Exchange(server_->address(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  // Answered while they were held: none of them was timed out and closed first.
  for (int fd : idle) {
    EXPECT_TRUE(StillOpen(fd));
    close(fd);
  }
  EXPECT_EQ(server_->scrapes(), 1u);
}

TEST_F(MetricsServerTest, BoundsItsConnectionsAndServesTheNewest) {
  const size_t n = kMaxConnections + 4;
  std::vector<int> idle;
  for (size_t i = 0; i < n; ++i) idle.push_back(Connect(server_->address()));
  const std::string r = Exchange(server_->address(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  // The server holds at most kMaxConnections: to take the scrape's it dropped the oldest idle
  // ones (accepted in order, so each idle connection was accepted before the scrape's).
  size_t open = 0;
  for (int fd : idle) {
    open += StillOpen(fd) ? 1 : 0;
    close(fd);
  }
  RecordProperty("idle_connections", static_cast<int>(n));
  RecordProperty("idle_still_open", static_cast<int>(open));
  EXPECT_LE(open, kMaxConnections - 1);
}

TEST(MetricsServer, AdoptsAnInheritedListeningSocket) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  Registry r;
  auto s = MetricsServer::Start("fd:" + std::to_string(fd), r);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Exchange((*s)->address(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
  s->reset();  // closes the adopted socket
}

TEST(MetricsServer, BadAddressesAndTakenPort) {
  Registry r;
  for (const char* bad : {"", "nohost", ":9100", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:x",
                          "fd:", "fd:2", "fd:x", "::1:9100"}) {
    const Status s = ValidateMetricsAddr("--metrics-addr", bad);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--metrics-addr"), std::string::npos) << s.ToString();
    EXPECT_EQ(MetricsServer::Start(bad, r).status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ValidateMetricsAddr("--metrics-addr", "[::1]:9100").ok());
  // An fd that is open but not a listening socket.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  EXPECT_EQ(MetricsServer::Start("fd:" + std::to_string(p[0]), r).status().code(),
            Code::kInvalidArgument);
  close(p[0]);
  close(p[1]);
  auto first = MetricsServer::Start("127.0.0.1:0", r);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(MetricsServer::Start((*first)->address(), r).status().code(), Code::kAlreadyExists);
}

}  // namespace
}  // namespace dualpath::metrics
