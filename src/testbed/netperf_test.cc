#include "dualpath/testbed/netperf.h"

#include <gtest/gtest.h>

#include <thread>

namespace dualpath::testbed {
namespace {

TEST(Netperf, SinkReceivesExactlyWhatBlastSent) {
  auto sink = Sink::Listen("127.0.0.1", 0);
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  ASSERT_NE(sink->port(), 0);
  Result<uint64_t> received = Status(Code::kInternal, "not run");
  std::thread t([&] { received = sink->AcceptAndDrain(); });

  BlastOptions o;
  o.host = "127.0.0.1";
  o.port = sink->port();
  o.max_bytes = 8 * 1024 * 1024 + 123;  // not a multiple of the chunk
  o.chunk_bytes = 64 * 1024;
  o.dscp = 10;
  auto sent = Blast(o, SteadyClock::Default());
  t.join();
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  EXPECT_EQ(sent->bytes, o.max_bytes);
  EXPECT_EQ(*received, o.max_bytes);
}

// A test double: every reading of the clock is 1 ms later than the previous one, so a duration
// limit is reached after a known number of loop iterations, independent of real time.
class TickClock final : public Clock {
 public:
  Nanos Now() const override { return ticks_++ * kNanosPerMilli; }

 private:
  mutable Nanos ticks_ = 0;
};

TEST(Netperf, DurationLimitStopsSending) {
  auto sink = Sink::Listen("127.0.0.1", 0);
  ASSERT_TRUE(sink.ok());
  Result<uint64_t> received = Status(Code::kInternal, "not run");
  std::thread t([&] { received = sink->AcceptAndDrain(); });
  BlastOptions o;
  o.host = "127.0.0.1";
  o.port = sink->port();
  o.chunk_bytes = 4096;
  EXPECT_EQ(Blast(o, TickClock()).status().code(), Code::kInvalidArgument);  // no limit at all
  o.duration = 5 * kNanosPerMilli;
  // Readings: connect deadline (0), start (1 ms), then one per loop: 2, 3, 4, 5 ms send, 6 ms
  // stops.
  auto sent = Blast(o, TickClock());
  t.join();
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  EXPECT_EQ(sent->bytes, 4u * 4096);
  EXPECT_EQ(sent->elapsed, 6 * kNanosPerMilli);
  EXPECT_EQ(*received, 4u * 4096);
}

TEST(Netperf, BadArguments) {
  BlastOptions o;
  o.host = "not-an-ip";
  o.max_bytes = 1;
  EXPECT_EQ(Blast(o, SteadyClock::Default()).status().code(), Code::kInvalidArgument);
  o.host = "127.0.0.1";
  o.dscp = 64;
  EXPECT_EQ(Blast(o, SteadyClock::Default()).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Sink::Listen("nope", 0).status().code(), Code::kInvalidArgument);
}

TEST(Netperf, RefusedConnectionFailsAfterTimeout) {
  // Reserve a port and close it again, so nothing listens there.
  uint16_t port = 0;
  {
    auto s = Sink::Listen("127.0.0.1", 0);
    ASSERT_TRUE(s.ok());
    port = s->port();
  }
  BlastOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.max_bytes = 1;
  o.connect_timeout = 0;  // no retries
  auto r = Blast(o, SteadyClock::Default());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("connect 127.0.0.1"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::testbed
