#include "dualpath/transfer/class_config.h"

#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace dualpath::transfer {
namespace {

TEST(ClassConfigTest, DefaultsSeparateTheClasses) {
  ClassConfig hi = DefaultHighClass();
  ClassConfig lo = DefaultLowClass();
  EXPECT_TRUE(ValidateClassConfig(hi).ok());
  EXPECT_TRUE(ValidateClassConfig(lo).ok());
  EXPECT_NE(hi.dscp, lo.dscp);
  EXPECT_NE(hi.ib_sl, lo.ib_sl);
  EXPECT_EQ(TosForDscp(46), 0xb8);  // EF
  EXPECT_EQ(TosForDscp(8), 0x20);   // CS1
}

TEST(ClassConfigTest, RejectsOutOfRangeValuesNamingTheField) {
  Status s = ValidateClassConfig(ClassConfig{.dscp = 64});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("dscp"), std::string::npos);
  s = ValidateClassConfig(ClassConfig{.ib_sl = 16});
  EXPECT_NE(s.message().find("ib_sl"), std::string::npos);
  s = ValidateClassConfig(ClassConfig{.ib_traffic_class = 256});
  EXPECT_NE(s.message().find("ib_traffic_class"), std::string::npos);
  EXPECT_FALSE(ValidateClassConfig(ClassConfig{.dscp = -2}).ok());
}

TEST(ClassConfigTest, UcxKeysFollowTheConfig) {
  auto kv = UcxConfigFor(ClassConfig{.dscp = 8, .ib_sl = 1, .ib_traffic_class = 32}, "tcp");
  std::map<std::string, std::string> m(kv.begin(), kv.end());
  EXPECT_EQ(m["TLS"], "tcp");
  EXPECT_EQ(m["IB_SL"], "1");
  EXPECT_EQ(m["IB_TRAFFIC_CLASS"], "32");
  EXPECT_TRUE(UcxConfigFor(ClassConfig{}, "").empty());
}

// Each class context carries its own settings: UCX keeps per-transport keys (IB_SL) in the
// config object passed to ucp_init, so two contexts in one process use different SLs. There is
// no InfiniBand device here, so the check is on the config object and on ucp_init accepting it.
std::string ConfigText(ucp_config_t* cfg) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  ucp_config_print(cfg, f, "t", UCS_CONFIG_PRINT_CONFIG);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

TEST(ClassConfigTest, EachClassContextGetsItsOwnServiceLevel) {
  ucp_context_h ctx[2] = {};
  const ClassConfig classes[2] = {DefaultHighClass(), DefaultLowClass()};
  for (int i = 0; i < 2; ++i) {
    ucp_config_t* cfg = nullptr;
    ASSERT_EQ(ucp_config_read(nullptr, nullptr, &cfg), UCS_OK);
    for (const auto& [k, v] : UcxConfigFor(classes[i], "tcp,self")) {
      ASSERT_EQ(ucp_config_modify(cfg, k.c_str(), v.c_str()), UCS_OK) << k << "=" << v;
    }
    std::string text = ConfigText(cfg);
    EXPECT_NE(text.find("IB_SL=" + std::to_string(classes[i].ib_sl)), std::string::npos) << text;
    EXPECT_NE(text.find("UCX_TLS=tcp,self"), std::string::npos);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    EXPECT_EQ(ucp_init(&params, cfg, &ctx[i]), UCS_OK);
    ucp_config_release(cfg);
  }
  for (ucp_context_h c : ctx) {
    if (c != nullptr) {
      ucp_cleanup(c);
    }
  }
}

}  // namespace
}  // namespace dualpath::transfer
