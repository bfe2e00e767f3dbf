#include "dualpath/control/options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dualpath::control {
namespace {

TEST(EngineList, ParsesNamesRolesNodes) {
  auto r = ParseEngineList("p0.0:prefill:p0,d0.0:decode:d0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "p0.0");
  EXPECT_EQ((*r)[0].role, sched::Role::kPrefill);
  EXPECT_EQ((*r)[0].node, "p0");
  EXPECT_EQ((*r)[1].role, sched::Role::kDecode);
}

TEST(EngineList, RejectsBadEntriesNamingThem) {
  auto bad_role = ParseEngineList("p0.0:prefil:p0");
  ASSERT_FALSE(bad_role.ok());
  EXPECT_NE(bad_role.status().message().find("prefil"), std::string::npos);
  auto dup = ParseEngineList("a:prefill:p0,a:decode:d0");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("duplicate"), std::string::npos);
  EXPECT_FALSE(ParseEngineList("a:prefill").ok());
  EXPECT_FALSE(ParseEngineList("a:prefill:p0:x").ok());
  EXPECT_FALSE(ParseEngineList(":prefill:p0").ok());
  EXPECT_FALSE(ParseEngineList("").ok());
}

TEST(System, TheServiceParsesTheThreeSystems) {
  const auto parse = [](std::string_view name) {
    return sched::ParseSystem(name, sched::kServiceSystems);
  };
  EXPECT_EQ(*parse("basic"), SystemKind::kBasic);
  EXPECT_EQ(*parse("dualpath"), SystemKind::kDualPath);
  EXPECT_EQ(*parse("oracle"), SystemKind::kOracle);
  EXPECT_FALSE(parse("dualpath-rr").ok());  // a simulator-only ablation step
  auto bad = parse("Basic");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(SystemName(SystemKind::kOracle), "oracle");
}

TEST(Options, ValidateNamesTheField) {
  ServiceOptions o;
  o.expect_prefill = 1;
  o.expect_decode = 1;
  EXPECT_TRUE(o.Validate().ok());
  ServiceOptions b = o;
  b.block_tokens = 0;
  EXPECT_NE(b.Validate().message().find("--block-tokens = 0 is outside"), std::string::npos);
  b = o;
  b.heartbeat_s = 0;
  EXPECT_NE(b.Validate().message().find("--heartbeat-s = 0 is outside"), std::string::npos);
  // Issue 19: upper bounds too (docs/control.md "Input ranges").
  b = o;
  b.block_tokens = 4'000'000'000u;
  EXPECT_NE(b.Validate().message().find("--block-tokens"), std::string::npos);
  b = o;
  b.heartbeat_s = 1e300;
  EXPECT_NE(b.Validate().message().find("--heartbeat-s"), std::string::npos);
  b = o;
  b.max_attempts = 1'000'000;
  EXPECT_NE(b.Validate().message().find("--max-attempts"), std::string::npos);
  b = o;
  b.expect_prefill = 1'000'000;
  EXPECT_NE(b.Validate().message().find("--expect-prefill"), std::string::npos);
  b = o;
  b.unfinished_token_limit = int64_t{1} << 62;
  EXPECT_NE(b.Validate().message().find("--unfinished-token-limit"), std::string::npos);
  b = o;
  b.expect_decode = 0;
  EXPECT_FALSE(b.Validate().ok());
  b = o;
  b.engines = *ParseEngineList("p0:prefill:p0");
  EXPECT_NE(b.Validate().message().find("decode"), std::string::npos);
  b = o;
  b.store_subdir = "x";
  EXPECT_NE(b.Validate().message().find("store_root"), std::string::npos);
  // Issue 17: the per-run subdirectory cannot name a path outside the store root.
  for (const std::string& bad :
       std::vector<std::string>{"..", ".", "../x", "a/b", std::string("a\0b", 3)}) {
    b = o;
    b.store_root = "/store";
    b.store_subdir = bad;
    EXPECT_NE(b.Validate().message().find("must be one directory name"), std::string::npos)
        << "'" << bad << "': " << b.Validate().ToString();
  }
  b = o;
  b.hash_algo = "md5";
  EXPECT_FALSE(b.Validate().ok());
}

}  // namespace
}  // namespace dualpath::control
