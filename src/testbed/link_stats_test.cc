#include "dualpath/testbed/link_stats.h"

#include <gtest/gtest.h>

namespace dualpath::testbed {
namespace {

// Shape of `ip -j -s link show dev X` (iproute2 6.x), trimmed.
constexpr const char* kSample = R"([{"ifindex":2,"ifname":"stor0","mtu":1500,"qdisc":"tbf",
  "stats64":{"rx":{"bytes":269178380,"packets":178000,"errors":0},
             "tx":{"bytes":4200,"packets":61,"errors":0}}}])";

TEST(ParseIpLinkStatsJson, ReadsCounters) {
  auto r = ParseIpLinkStatsJson(kSample);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rx_bytes, 269178380u);
  EXPECT_EQ(r->tx_bytes, 4200u);
  EXPECT_EQ(r->rx_packets, 178000u);
  EXPECT_EQ(r->tx_packets, 61u);
}

TEST(ParseIpLinkStatsJson, RejectsOtherShapes) {
  EXPECT_EQ(ParseIpLinkStatsJson("").status().code(), Code::kParseError);
  EXPECT_EQ(ParseIpLinkStatsJson("[]").status().code(), Code::kParseError);
  auto no_stats = ParseIpLinkStatsJson(R"([{"ifname":"x"}])");
  ASSERT_FALSE(no_stats.ok());
  EXPECT_NE(no_stats.status().message().find("stats64"), std::string::npos);
  auto no_tx = ParseIpLinkStatsJson(R"([{"stats64":{"rx":{"bytes":1,"packets":1}}}])");
  ASSERT_FALSE(no_tx.ok());
  EXPECT_NE(no_tx.status().message().find("tx"), std::string::npos);
}

TEST(ReadLinkCounters, MissingNamespaceIsNotFound) {
  auto r = ReadLinkCounters("dp-no-such-netns.p0", "stor0");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("dp-no-such-netns.p0"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::testbed
