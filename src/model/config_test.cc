// RefModelConfig: spec parsing and printing, validation messages, the kv geometry.
#include <gtest/gtest.h>

#include <string>

#include "dualpath/kv/model.h"
#include "dualpath/model/ref_model.h"

namespace dualpath::model {
namespace {

void ExpectInvalid(std::string_view spec, std::string_view names) {
  auto r = RefModelConfig::Parse(spec);
  ASSERT_FALSE(r.ok()) << spec;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << spec;
  EXPECT_NE(r.status().message().find(names), std::string::npos)
      << spec << " → " << r.status().ToString();
}

TEST(RefModelConfig, EmptySpecIsDefaults) {
  auto r = RefModelConfig::Parse("");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ToString(), RefModelConfig{}.ToString());
  EXPECT_EQ(r->layers, 8u);
}

TEST(RefModelConfig, SubsetKeepsOtherDefaults) {
  auto r = RefModelConfig::Parse(" layers=2, kv_heads=2 ,seed=18446744073709551615");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->layers, 2u);
  EXPECT_EQ(r->kv_heads, 2u);
  EXPECT_EQ(r->q_heads, 4u);
  EXPECT_EQ(r->seed, 18446744073709551615ull);
}

TEST(RefModelConfig, ToStringParseRoundTrip) {
  RefModelConfig c;
  c.layers = 3;
  c.q_heads = 6;
  c.kv_heads = 2;
  c.head_dim = 12;
  c.ffn_dim = 100;
  c.vocab = 1000;
  c.seed = 123456789012345ull;
  c.rope_theta = 500000.3f;
  auto r = RefModelConfig::Parse(c.ToString());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->layers, c.layers);
  EXPECT_EQ(r->q_heads, c.q_heads);
  EXPECT_EQ(r->kv_heads, c.kv_heads);
  EXPECT_EQ(r->head_dim, c.head_dim);
  EXPECT_EQ(r->ffn_dim, c.ffn_dim);
  EXPECT_EQ(r->vocab, c.vocab);
  EXPECT_EQ(r->seed, c.seed);
  EXPECT_EQ(r->rope_theta, c.rope_theta);  // exact: shortest round-trip formatting
  EXPECT_EQ(r->ToString(), c.ToString());
}

TEST(RefModelConfig, BadInputNamesTheProblem) {
  ExpectInvalid("layer=2", "unknown key 'layer'");
  ExpectInvalid("layers=0", "layers must be > 0");
  ExpectInvalid("vocab=0", "vocab must be > 0");
  ExpectInvalid("q_heads=4,kv_heads=3", "kv_heads=3 must divide q_heads=4");
  ExpectInvalid("head_dim=7", "head_dim=7 must be even");
  ExpectInvalid("layers=abc", "layers='abc'");
  ExpectInvalid("layers=-1", "layers='-1'");
  ExpectInvalid("layers=4294967296", "layers='4294967296'");
  ExpectInvalid("layers=2x", "layers='2x'");
  ExpectInvalid("layers=", "layers=''");
  ExpectInvalid("layers", "'layers' is not key=value");
  ExpectInvalid("layers=2,layers=3", "'layers' repeated");
  ExpectInvalid("layers=2,", "trailing ','");
  ExpectInvalid("rope_theta=-1", "rope_theta");
  ExpectInvalid("rope_theta=inf", "rope_theta");
  ExpectInvalid("vocab=100000000", "limit 1 GiB");
  ExpectInvalid("layers=4000000000", "layers=4000000000 is outside [1, 4096]");
}

TEST(RefModelConfig, GeometryMatchesKvBytesAndValidates) {
  for (const char* spec : {"", "kv_heads=2", "q_heads=8,kv_heads=1,head_dim=16"}) {
    auto c = RefModelConfig::Parse(spec);
    ASSERT_TRUE(c.ok());
    const kv::ModelGeometry g = c->Geometry();
    EXPECT_TRUE(g.Validate().ok()) << g.Validate().ToString();
    EXPECT_EQ(g.kv_bytes_per_token_per_layer, c->KvBytesPerTokenPerLayer());
    EXPECT_EQ(kv::DeriveKvBytesPerTokenPerLayer(g), c->KvBytesPerTokenPerLayer());
    EXPECT_EQ(g.KvBytesPerToken(), c->KvBytesPerTokenPerLayer() * c->layers);
    EXPECT_EQ(g.name, "ref");
    EXPECT_EQ(g.kv_dtype, kv::KvDtype::kFp32);
    EXPECT_EQ(g.attention,
              c->kv_heads == c->q_heads ? kv::AttentionKind::kMha : kv::AttentionKind::kGqa);
    EXPECT_EQ(g.params_total, static_cast<double>(c->ParameterCount()));
  }
  // The documented default: 8 KiB of KV per token (docs/e2e.md).
  EXPECT_EQ(RefModelConfig{}.Geometry().KvBytesPerToken(), 8u * 1024);
}

TEST(RefModelConfig, ParameterCountByHand) {
  // hidden 2, kv_dim 2, ffn 3, vocab 5: embedding 10 + LM head 10 + final norm 2 +
  // layer (norms 4 + QKV 2*6 + O 4 + MLP 18 = 38).
  auto c = RefModelConfig::Parse("layers=1,q_heads=1,kv_heads=1,head_dim=2,ffn_dim=3,vocab=5");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ParameterCount(), 60u);
}

}  // namespace
}  // namespace dualpath::model
