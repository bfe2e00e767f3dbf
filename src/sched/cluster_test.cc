#include "dualpath/sched/cluster.h"

#include <gtest/gtest.h>

namespace dualpath::sched {
namespace {

TEST(ClusterTest, Uniform2P4D) {
  auto c = MakeUniformCluster({.prefill_nodes = 2, .decode_nodes = 4, .gpus_per_node = 8});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_engines(), 48);
  EXPECT_EQ(c->num_nodes(), 6);
  EXPECT_EQ(c->num_groups(), 6);
  // Prefill nodes first.
  EXPECT_EQ(c->engines[0].role, Role::kPrefill);
  EXPECT_EQ(c->engines[15].role, Role::kPrefill);
  EXPECT_EQ(c->engines[15].node, NodeId(1));
  EXPECT_EQ(c->engines[16].role, Role::kDecode);
  EXPECT_EQ(c->engines[16].node, NodeId(2));
  EXPECT_EQ(c->engines[16].group, GroupId(2));
  EXPECT_EQ(c->engines[47].group, GroupId(5));
}

TEST(ClusterTest, MultiNodeGroups) {
  auto c = MakeUniformCluster({.prefill_nodes = 4,
                               .decode_nodes = 6,
                               .gpus_per_node = 2,
                               .nodes_per_prefill_group = 2,
                               .nodes_per_decode_group = 3});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_groups(), 4);
  EXPECT_EQ(c->engines[3].group, GroupId(0));  // node 1
  EXPECT_EQ(c->engines[4].group, GroupId(1));  // node 2
  EXPECT_EQ(c->engines[8].group, GroupId(2));  // first decode node
  EXPECT_EQ(c->engines[19].group, GroupId(3));
}

TEST(ClusterTest, UniformBadSpecNamesField) {
  struct Case {
    UniformClusterSpec spec;
    const char* field;
  } cases[] = {
      {{.prefill_nodes = 0}, "prefill_nodes"},
      {{.decode_nodes = -1}, "decode_nodes"},
      {{.gpus_per_node = 0}, "gpus_per_node"},
      {{.prefill_nodes = 3, .nodes_per_prefill_group = 2}, "nodes_per_prefill_group"},
      {{.decode_nodes = 4, .nodes_per_decode_group = 0}, "nodes_per_decode_group"},
      // Issue 19: memory grew with one number; 999999P999999D x 2048 GPUs also overflows int.
      {{.prefill_nodes = 999999, .decode_nodes = 999999, .gpus_per_node = 2048},
       "engines is outside [1, 1048576]"},
  };
  for (const Case& c : cases) {
    auto r = MakeUniformCluster(c.spec);
    ASSERT_FALSE(r.ok()) << c.field;
    EXPECT_EQ(r.status().code(), Code::kSchedBadConfig);
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().ToString();
  }
}

TEST(ClusterTest, ParsePd) {
  auto a = ParsePd("2P4D");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->prefill_nodes, 2);
  EXPECT_EQ(a->decode_nodes, 4);
  EXPECT_EQ(a->gpus_per_node, 8);
  auto b = ParsePd("48p96d");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefill_nodes, 48);
  EXPECT_EQ(b->decode_nodes, 96);
  for (const char* bad :
       {"", "0P2D", "2P0D", "2X4D", "2P", "P4D", "2P4", "2P4DX", "-1P2D", "2P 4D", "9999999P1D"}) {
    auto r = ParsePd(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kSchedBadConfig);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().ToString();
  }
}

ClusterDesc Small() {
  auto c = MakeUniformCluster({.prefill_nodes = 1, .decode_nodes = 1, .gpus_per_node = 2});
  return c.value();
}

TEST(ClusterTest, ValidateRejectsBrokenInvariants) {
  {
    ClusterDesc c = Small();
    c.engines[1].id = EngineId(7);
    EXPECT_NE(c.Validate().message().find("dense"), std::string::npos);
  }
  {
    ClusterDesc c = Small();
    c.engines[1].group = GroupId(1);  // node 0 split over groups 0 and 1
    Status s = c.Validate();
    EXPECT_EQ(s.code(), Code::kSchedBadConfig);
    EXPECT_NE(s.message().find("node 0"), std::string::npos) << s.ToString();
  }
  {
    ClusterDesc c = Small();
    c.engines[1].role = Role::kDecode;  // group 0 mixes roles
    Status s = c.Validate();
    EXPECT_NE(s.message().find("mixes"), std::string::npos) << s.ToString();
  }
  {
    ClusterDesc c = Small();
    for (EngineDesc& e : c.engines) e.role = Role::kPrefill;
    EXPECT_NE(c.Validate().message().find("no decode"), std::string::npos);
  }
  {
    ClusterDesc c;
    EXPECT_EQ(c.Validate().code(), Code::kSchedBadConfig);
  }
  EXPECT_TRUE(Small().Validate().ok());
  EXPECT_EQ(RoleName(Role::kDecode), "decode");
}

}  // namespace
}  // namespace dualpath::sched
