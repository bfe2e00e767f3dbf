#include "dualpath/testbed/cluster.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dualpath::testbed {
namespace {

TEST(ParsePdSpec, AcceptsCounts) {
  auto r = ParsePdSpec("2P1D");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first, 2);
  EXPECT_EQ(r->second, 1);
  auto lower = ParsePdSpec("12p3d");
  ASSERT_TRUE(lower.ok());
  EXPECT_EQ(lower->first, 12);
  EXPECT_EQ(lower->second, 3);
}

TEST(ParsePdSpec, RejectsMalformed) {
  for (const char* bad : {"", "P1D", "1P", "1PD", "0P1D", "1P0D", "33P1D", "1P1", "1x1D", "-1P1D",
                          "1P1D ", "1P2P1D"}) {
    auto r = ParsePdSpec(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--pd"), std::string::npos);
  }
}

TEST(ParseRate, SiUnits) {
  EXPECT_EQ(ParseRate("400mbit").value(), 400'000'000u);
  EXPECT_EQ(ParseRate("2gbit").value(), 2'000'000'000u);
  EXPECT_EQ(ParseRate("1500kbit").value(), 1'500'000u);
  EXPECT_EQ(ParseRate("1000000bit").value(), 1'000'000u);
  EXPECT_EQ(ParseRate("2GBit").value(), 2'000'000'000u);
}

TEST(ParseRate, RejectsBadRates) {
  for (const char* bad : {"", "mbit", "400", "400mb", "400 mbit", "4.5gbit", "999kbit", "101gbit",
                          "99999999999999999999999gbit"}) {
    auto r = ParseRate(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(bad), std::string::npos);
  }
}

TEST(FormatRate, LargestExactUnit) {
  EXPECT_EQ(FormatRate(400'000'000), "400mbit");
  EXPECT_EQ(FormatRate(2'000'000'000), "2gbit");
  EXPECT_EQ(FormatRate(1'500'000), "1500kbit");
  EXPECT_EQ(FormatRate(1'000'001), "1000001bit");
}

TEST(ValidateClusterName, Charset) {
  EXPECT_TRUE(ValidateClusterName("dp").ok());
  EXPECT_TRUE(ValidateClusterName("bench_2-x").ok());
  EXPECT_FALSE(ValidateClusterName("").ok());
  EXPECT_FALSE(ValidateClusterName("a.b").ok());  // '.' separates cluster and node in netns names
  EXPECT_FALSE(ValidateClusterName("a/b").ok());
  EXPECT_FALSE(ValidateClusterName(std::string(25, 'a')).ok());
}

ClusterOptions Options2P2D() {
  ClusterOptions o;
  o.name = "t1";
  o.prefill_nodes = 2;
  o.decode_nodes = 2;
  o.state_root = "/var/tmp/x";
  return o;
}

TEST(PlanCluster, NamesAddressesAndPaths) {
  auto r = PlanCluster(Options2P2D());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Cluster& c = *r;
  EXPECT_EQ(c.PdSpec(), "2P2D");
  EXPECT_EQ(c.state_dir, "/var/tmp/x/t1");
  EXPECT_EQ(c.storage.netns, "dp-t1.stor");
  EXPECT_EQ(c.storage.address, "10.99.1.1");
  EXPECT_EQ(c.compute.netns, "dp-t1.sw");
  ASSERT_EQ(c.nodes.size(), 4u);
  const char* names[] = {"p0", "p1", "d0", "d1"};
  for (size_t k = 0; k < 4; ++k) {
    const Node& n = c.nodes[k];
    EXPECT_EQ(n.name, names[k]);
    EXPECT_EQ(n.role, k < 2 ? Role::kPrefill : Role::kDecode);
    EXPECT_EQ(n.index, static_cast<int>(k % 2));
    EXPECT_EQ(n.netns, std::string("dp-t1.") + names[k]);
    EXPECT_EQ(n.storage_addr, "10.99.1." + std::to_string(11 + k));
    EXPECT_EQ(n.compute_addr, "10.99.2." + std::to_string(11 + k));
    EXPECT_EQ(n.mount, std::string("/var/tmp/x/t1/mnt/") + names[k]);
    EXPECT_EQ(n.storage_peer_if, std::string("s-") + names[k]);
  }
  EXPECT_EQ(c.FindNode("d1"), &c.nodes[3]);
  EXPECT_EQ(c.FindNode("d2"), nullptr);
}

TEST(PlanCluster, RejectsBadOptions) {
  ClusterOptions o = Options2P2D();
  o.name = "bad name";
  EXPECT_EQ(PlanCluster(o).status().code(), Code::kInvalidArgument);
  o = Options2P2D();
  o.decode_nodes = 0;
  EXPECT_EQ(PlanCluster(o).status().code(), Code::kInvalidArgument);
  o = Options2P2D();
  o.storage_rate_bps = 10;
  EXPECT_EQ(PlanCluster(o).status().code(), Code::kInvalidArgument);
  o = Options2P2D();
  o.state_root = "relative/dir";
  EXPECT_EQ(PlanCluster(o).status().code(), Code::kInvalidArgument);
}

TEST(ClusterJson, RoundTrip) {
  ClusterOptions o = Options2P2D();
  o.dscp_priority = true;
  o.storage_rate_bps = 123'000'000;
  Cluster c = PlanCluster(o).value();
  const std::string text = ClusterToJson(c);
  auto back = ParseClusterJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ClusterToJson(*back), text);
  EXPECT_EQ(back->storage_rate_bps, 123'000'000u);
  EXPECT_TRUE(back->dscp_priority);
  EXPECT_EQ(back->nodes[2].role, Role::kDecode);
  // Documented fields other components rely on (docs/testbed.md).
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["schema"], "dualpath.testbed.cluster");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["pd"], "2P2D");
  EXPECT_EQ(j["dscp_high"][0], 46);
  EXPECT_EQ(j["nodes"][0]["mount"], "/var/tmp/x/t1/mnt/p0");
}

TEST(ClusterJson, NamesTheBadField) {
  Cluster c = PlanCluster(Options2P2D()).value();
  auto j = nlohmann::json::parse(ClusterToJson(c));
  j["nodes"][1].erase("storage_addr");
  auto r = ParseClusterJson(j.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kParseError);
  EXPECT_NE(r.status().message().find("nodes[1].storage_addr"), std::string::npos)
      << r.status().message();

  j = nlohmann::json::parse(ClusterToJson(c));
  j["storage"]["prefix_len"] = "24";
  r = ParseClusterJson(j.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("storage.prefix_len"), std::string::npos);

  j = nlohmann::json::parse(ClusterToJson(c));
  j["version"] = 2;
  EXPECT_EQ(ParseClusterJson(j.dump()).status().code(), Code::kParseError);

  j = nlohmann::json::parse(ClusterToJson(c));
  j["nodes"].erase(0);
  EXPECT_EQ(ParseClusterJson(j.dump()).status().code(), Code::kParseError);

  EXPECT_EQ(ParseClusterJson("{not json").status().code(), Code::kParseError);
  EXPECT_EQ(ParseClusterJson("[]").status().code(), Code::kParseError);
}

TEST(LoadCluster, MissingClusterIsNotFound) {
  auto r = LoadCluster("nosuchcluster", "/nonexistent-dualpath-root");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTestbedNotFound);
  EXPECT_NE(r.status().message().find("cluster up"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::testbed
