#include "dualpath/kv/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

namespace dualpath::kv {
namespace {

const ModelGeometry& Preset(std::string_view name) {
  for (const ModelGeometry& m : ModelPresets()) {
    if (m.name == name) return m;
  }
  ADD_FAILURE() << "no preset " << name;
  return ModelPresets().front();
}

TEST(ModelPresetsTest, IdsTheOtherComponentsUse) {
  for (const char* id : {"ds660b", "ds27b", "qwen2.5-32b", "r1-llama-8b", "qwen3-32b"}) {
    Result<ModelGeometry> m = FindModel(id);
    ASSERT_TRUE(m.ok()) << id;
    EXPECT_EQ(m->name, id);
    EXPECT_TRUE(m->Validate().ok()) << m->Validate().ToString();
  }
  EXPECT_EQ(ModelPresets().size(), 5u);
}

TEST(ModelPresetsTest, KvBytesFromConfigs) {
  // GQA bf16: 2 (K,V) x kv_heads 8 x head_dim 128 x 2 bytes = 4096 per layer.
  EXPECT_EQ(Preset("qwen2.5-32b").kv_bytes_per_token_per_layer, 4096u);
  EXPECT_EQ(Preset("qwen2.5-32b").KvBytesPerToken(), 64u * 4096);
  EXPECT_EQ(Preset("qwen3-32b").KvBytesPerToken(), 64u * 4096);
  EXPECT_EQ(Preset("r1-llama-8b").KvBytesPerToken(), 32u * 4096);
  // MLA FP8 (FlashMLA layout): 512 latent + 4 x fp32 scales + 64 x bf16 rope = 656 per layer.
  EXPECT_EQ(Preset("ds660b").kv_bytes_per_token_per_layer, 656u);
  EXPECT_EQ(Preset("ds660b").KvBytesPerToken(), 61u * 656);
  EXPECT_EQ(Preset("ds27b").KvBytesPerToken(), 30u * 656);
}

TEST(ModelPresetsTest, ParamsPlausible) {
  // Published: DeepSeek-V3 671B total / 37B active; Qwen2.5-32B 32.5B; Llama-3.1-8B 8.0B.
  EXPECT_NEAR(Preset("ds660b").params_total / 1e9, 671.9, 1.0);
  EXPECT_NEAR(Preset("ds660b").params_active / 1e9, 38.4, 1.0);
  EXPECT_NEAR(Preset("ds27b").params_total / 1e9, 27.2, 0.5);
  EXPECT_NEAR(Preset("qwen2.5-32b").params_total / 1e9, 32.8, 0.5);
  EXPECT_NEAR(Preset("r1-llama-8b").params_total / 1e9, 8.03, 0.01);
  EXPECT_NEAR(Preset("qwen3-32b").params_active_non_embedding / 1e9, 31.2, 0.1);
  // Routed experts (scripts/kv/derive_params.py): 58 x 256 x 3 x 7168 x 2048 for V3.2, so ~18.0 B
  // parameters are replicated on every GPU under expert parallelism; dense models have none.
  EXPECT_NEAR(Preset("ds660b").params_routed_experts / 1e9, 653.909, 0.001);
  EXPECT_NEAR((Preset("ds660b").params_total - Preset("ds660b").params_routed_experts) / 1e9,
              17.969, 0.001);
  EXPECT_NEAR(Preset("ds27b").params_routed_experts / 1e9, 24.631, 0.001);
  EXPECT_EQ(Preset("qwen2.5-32b").params_routed_experts, 0.0);
}

TEST(FindModelTest, AliasesCaseInsensitive) {
  EXPECT_EQ(FindModel("DeepSeek-V3.2")->name, "ds660b");
  EXPECT_EQ(FindModel("QWEN2.5-32B")->name, "qwen2.5-32b");
  EXPECT_EQ(FindModel("deepseek-r1-distill-llama-8b")->name, "r1-llama-8b");
}

TEST(FindModelTest, UnknownListsKnown) {
  Result<ModelGeometry> m = FindModel("gpt-5");
  EXPECT_EQ(m.status().code(), Code::kKvUnknownModel);
  EXPECT_NE(m.status().message().find("'gpt-5'"), std::string::npos);
  EXPECT_NE(m.status().message().find("ds660b, ds27b, qwen2.5-32b, r1-llama-8b, qwen3-32b"),
            std::string::npos)
      << m.status().message();
}

TEST(ModelEnumsTest, NamesRoundTrip) {
  for (AttentionKind k : {AttentionKind::kMha, AttentionKind::kGqa, AttentionKind::kMla}) {
    EXPECT_EQ(*ParseAttentionKind(AttentionKindName(k)), k);
  }
  for (KvDtype d : {KvDtype::kFp32, KvDtype::kBf16, KvDtype::kFp16, KvDtype::kFp8}) {
    EXPECT_EQ(*ParseKvDtype(KvDtypeName(d)), d);
  }
  EXPECT_EQ(ParseAttentionKind("mqa").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseKvDtype("int4").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kFp32), 4u);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kBf16), 2u);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kFp16), 2u);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kFp8), 1u);
}

ModelGeometry SmallMha() {
  ModelGeometry m;
  m.name = "tiny";
  m.num_layers = 2;
  m.attention = AttentionKind::kMha;
  m.num_heads = m.num_kv_heads = 4;
  m.head_dim = m.v_head_dim = 8;
  m.kv_dtype = KvDtype::kFp32;
  m.params_total = m.params_active = 1000;
  m.params_active_non_embedding = 800;
  m.kv_bytes_per_token_per_layer = DeriveKvBytesPerTokenPerLayer(m);
  return m;
}

TEST(DeriveKvBytesTest, EachAttentionKind) {
  ModelGeometry m = SmallMha();
  EXPECT_EQ(DeriveKvBytesPerTokenPerLayer(m), 2u * 4 * 8 * 4);
  m.attention = AttentionKind::kMla;
  m.kv_lora_rank = 512;
  m.qk_rope_head_dim = 64;
  m.kv_dtype = KvDtype::kBf16;
  EXPECT_EQ(DeriveKvBytesPerTokenPerLayer(m), 576u * 2);
  m.kv_dtype = KvDtype::kFp8;
  EXPECT_EQ(DeriveKvBytesPerTokenPerLayer(m), 656u);
}

TEST(ModelFlopsTest, LinearIsTwiceActiveNonEmbedding) {
  EXPECT_DOUBLE_EQ(SmallMha().LinearFlopsPerToken(), 1600.0);
  EXPECT_DOUBLE_EQ(Preset("ds660b").LinearFlopsPerToken(),
                   2.0 * Preset("ds660b").params_active_non_embedding);
}

// Brute force: sum over queries of attended keys, per the header's definition.
double BruteAttention(const ModelGeometry& m, uint64_t c, uint64_t n) {
  double total = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double keys = static_cast<double>(c + i + 1);
    if (m.attention == AttentionKind::kMla && m.index_topk > 0) {
      total += 2.0 * m.num_heads * (2.0 * m.kv_lora_rank + m.qk_rope_head_dim) *
               std::min<double>(keys, m.index_topk);
      total += 2.0 * m.index_num_heads * m.index_head_dim * keys;
    } else {
      total += 2.0 * m.num_heads * (m.head_dim + m.v_head_dim) * keys;
    }
  }
  return total * m.num_layers;
}

TEST(ModelFlopsTest, AttentionMatchesBruteForce) {
  ModelGeometry sparse = Preset("ds27b");
  sparse.index_topk = 100;  // small cap so the loops cross it
  for (const ModelGeometry& m : {SmallMha(), Preset("qwen2.5-32b"), Preset("ds660b"), sparse}) {
    for (auto [c, n] : {std::pair<uint64_t, uint64_t>{0, 1},
                        {0, 250},
                        {37, 80},
                        {99, 1},
                        {100, 5},
                        {150, 300},
                        {5000, 3}}) {
      const double want = BruteAttention(m, c, n);
      EXPECT_NEAR(m.AttentionFlops(c, n), want, want * 1e-12) << m.name << " c=" << c << " n=" << n;
    }
    EXPECT_EQ(m.AttentionFlops(123, 0), 0.0);
  }
}

TEST(ModelFlopsTest, AttentionIsAdditiveOverChunks) {
  // Chunked prefill must cost the same as one pass.
  const ModelGeometry& m = Preset("ds660b");
  const double whole = m.AttentionFlops(1000, 5000);
  const double chunks = m.AttentionFlops(1000, 2000) + m.AttentionFlops(3000, 3000);
  EXPECT_NEAR(chunks, whole, whole * 1e-12);
}

TEST(ModelFlopsTest, SparseAttentionCapsMainAttention) {
  const ModelGeometry& ds = Preset("ds660b");
  const double at_100k = ds.AttentionFlops(100000, 1);
  const double at_200k = ds.AttentionFlops(200000, 1);
  // Only the indexer grows with context once past top-k: per extra token 2*64*128 per layer.
  EXPECT_NEAR(at_200k - at_100k, 100000.0 * 2 * 64 * 128 * 61, 1.0);
}

// DualPath §1: for DeepSeek-V3.2 at the trace's mean context (32.7k) and append (429) the
// cache-compute ratio is ~22 GB/PFLOP. Our KV bytes and FLOP model must land near it.
TEST(ModelFlopsTest, PaperCacheComputeRatio) {
  const ModelGeometry& ds = Preset("ds660b");
  const uint64_t context = 32700, append = 429;
  const double kv_gb = static_cast<double>(context - append) * ds.KvBytesPerToken() / 1e9;
  const double pflop = ds.PrefillFlops(context - append, append) / 1e15;
  EXPECT_NEAR(kv_gb / pflop, 22.0, 2.0);
}

TEST(ModelFlopsTest, PrefillAndDecodeCompose) {
  const ModelGeometry& q = Preset("qwen3-32b");
  EXPECT_DOUBLE_EQ(q.PrefillFlops(10, 20), q.LinearFlopsPerToken() * 20 + q.AttentionFlops(10, 20));
  EXPECT_DOUBLE_EQ(q.DecodeFlopsPerToken(4096), q.PrefillFlops(4096, 1));
  EXPECT_DOUBLE_EQ(q.DecodeWeightBytes(2.0), 2.0 * q.params_active);
}

TEST(ModelDecodeTest, KvBytesRead) {
  const ModelGeometry& q = Preset("qwen2.5-32b");
  EXPECT_DOUBLE_EQ(q.DecodeKvBytesRead(1000), 1000.0 * q.KvBytesPerToken());
  const ModelGeometry& ds = Preset("ds660b");
  // Below top-k: all latents plus all indexer keys.
  EXPECT_DOUBLE_EQ(ds.DecodeKvBytesRead(1000), 61.0 * 1000 * (128 + 656));
  // Above: indexer keys for all, latents for top-k only.
  EXPECT_DOUBLE_EQ(ds.DecodeKvBytesRead(10000), 61.0 * (10000.0 * 128 + 2048.0 * 656));
}

TEST(ModelValidateTest, RejectsInconsistentFields) {
  auto expect_bad = [](ModelGeometry m, std::string_view what) {
    const Status s = m.Validate();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  EXPECT_TRUE(SmallMha().Validate().ok());
  ModelGeometry m = SmallMha();
  m.num_layers = 0;
  expect_bad(m, "num_layers");
  m = SmallMha();
  m.num_kv_heads = 2;
  expect_bad(m, "mha needs");
  m = SmallMha();
  m.attention = AttentionKind::kGqa;
  m.num_kv_heads = 3;
  expect_bad(m, "multiple");
  m = SmallMha();
  m.attention = AttentionKind::kMla;
  expect_bad(m, "kv_lora_rank");
  m = SmallMha();
  m.index_topk = 5;
  expect_bad(m, "all set or all 0");
  m = SmallMha();
  m.kv_bytes_per_token_per_layer = 0;
  expect_bad(m, "kv_bytes_per_token_per_layer");
  m = SmallMha();
  m.params_total = 10;
  expect_bad(m, "params_total");
  m = SmallMha();
  m.params_routed_experts = m.params_total + 1;
  expect_bad(m, "params_routed_experts");
  // Issue 19: sizes whose KV bytes per token would wrap 64 bits are outside the ranges.
  m = SmallMha();
  m.num_layers = 0xFFFFFFFFu;
  m.kv_bytes_per_token_per_layer = uint64_t{1} << 40;
  expect_bad(m, "num_layers = 4294967295 is outside [1, 4096]");
  m = SmallMha();
  m.kv_bytes_per_token_per_layer = uint64_t{1} << 40;
  expect_bad(m, "kv_bytes_per_token_per_layer = 1099511627776 is outside");
  m = SmallMha();
  m.params_active_non_embedding = std::numeric_limits<double>::infinity();
  expect_bad(m, "params_active_non_embedding = inf is outside");
  m = SmallMha();
  m.name.clear();
  EXPECT_EQ(m.Validate().code(), Code::kInvalidArgument);
}

constexpr const char* kGoodJson = R"({
  "name": "my-gqa", "display_name": "My GQA", "aliases": ["mine"],
  "attention": "gqa", "num_layers": 4, "hidden_size": 256, "num_heads": 8, "num_kv_heads": 2,
  "head_dim": 32, "kv_dtype": "fp16", "params_active_non_embedding": 1e6,
  "params_active": 1.5e6, "params_total": 2e6
})";

TEST(ModelJsonTest, ParsesAndDerives) {
  Result<ModelGeometry> m = ParseModelJson(kGoodJson, "test");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->name, "my-gqa");
  EXPECT_EQ(m->display_name, "My GQA");
  EXPECT_EQ(m->aliases, std::vector<std::string>{"mine"});
  EXPECT_EQ(m->v_head_dim, 32u);
  EXPECT_EQ(m->kv_dtype, KvDtype::kFp16);
  EXPECT_EQ(m->kv_bytes_per_token_per_layer, 2u * 2 * 32 * 2);
  EXPECT_EQ(m->hidden_size, 256u);
  EXPECT_DOUBLE_EQ(m->params_total, 2e6);
}

TEST(ModelJsonTest, MlaWithOverride) {
  Result<ModelGeometry> m = ParseModelJson(R"({"name":"x","attention":"mla","num_layers":3,
    "num_heads":16,"head_dim":192,"v_head_dim":128,"kv_lora_rank":512,"qk_rope_head_dim":64,
    "index_num_heads":8,"index_head_dim":64,"index_topk":512,"kv_dtype":"fp8",
    "kv_bytes_per_token_per_layer":788,"params_active_non_embedding":5e8})",
                                           "mla");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->num_kv_heads, 1u);
  EXPECT_EQ(m->kv_bytes_per_token_per_layer, 788u);
  EXPECT_EQ(m->index_topk, 512u);
}

TEST(ModelJsonTest, ErrorsNameTheProblem) {
  struct Case {
    const char* json;
    Code code;
    const char* expect;
  };
  const Case cases[] = {
      {"{", Code::kParseError, "not valid JSON"},
      {"[]", Code::kParseError, "must be an object"},
      {R"({"name":"a","attention":"gqa","num_layers":1,"num_heads":1,"num_kv_heads":1,
          "head_dim":8,"params_active_non_embedding":1,"num_layer":2})",
       Code::kInvalidArgument, "unknown key 'num_layer'"},
      {R"({"name":"a","attention":"gqa","num_heads":1,"num_kv_heads":1,"head_dim":8,
          "params_active_non_embedding":1})",
       Code::kInvalidArgument, "'num_layers' missing"},
      {R"({"name":"a","attention":"gqa","num_layers":-1,"num_heads":1,"num_kv_heads":1,
          "head_dim":8,"params_active_non_embedding":1})",
       Code::kInvalidArgument, "'num_layers' must be a non-negative integer"},
      {R"({"name":"a","attention":"gqa","num_layers":"2","num_heads":1,"num_kv_heads":1,
          "head_dim":8,"params_active_non_embedding":1})",
       Code::kInvalidArgument, "'num_layers' must be a non-negative integer"},
      {R"({"name":"a","attention":"sliding","num_layers":1,"num_heads":1,"head_dim":8,
          "params_active_non_embedding":1})",
       Code::kInvalidArgument, "unknown attention kind 'sliding'"},
      {R"({"name":5})", Code::kInvalidArgument, "'name' must be a string"},
      {R"({"name":"a","attention":"mla","num_layers":1,"num_heads":1,"head_dim":8,
          "params_active_non_embedding":1})",
       Code::kInvalidArgument, "'kv_lora_rank' missing"},
      {R"({"name":"a","attention":"gqa","num_layers":0,"num_heads":1,"num_kv_heads":1,
          "head_dim":8,"params_active_non_embedding":1})",
       Code::kInvalidArgument, "key 'num_layers' = 0 is outside [1, 4096]"},
      // Issue 19: geometry whose KV bytes per token overflow 64 bits was accepted and printed
      // wrapped; every dimension now has a range checked where it is parsed.
      {R"({"name":"a","attention":"gqa","num_layers":4294967295,"num_heads":4294967295,
          "num_kv_heads":4294967295,"head_dim":4294967295,"params_active_non_embedding":1})",
       Code::kInvalidArgument, "key 'num_layers' = 4294967295 is outside [1, 4096]"},
      {R"({"name":"a","attention":"gqa","num_layers":8,"num_heads":1,"num_kv_heads":1,
          "head_dim":4294967296,"params_active_non_embedding":1})",
       Code::kInvalidArgument, "key 'head_dim' = 4294967296 is outside [1, 65536]"},
      {R"({"name":"a","attention":"gqa","num_layers":8,"num_heads":1,"num_kv_heads":1,
          "head_dim":8,"params_active_non_embedding":1e300})",
       Code::kInvalidArgument, "key 'params_active_non_embedding' = 1e+300 is outside"},
      {R"({"name":"a","attention":"gqa","num_layers":8,"num_heads":1,"num_kv_heads":1,
          "head_dim":8,"params_active_non_embedding":1e999})",
       Code::kParseError, "not valid JSON"},
      {R"({"name":"a","aliases":"b"})", Code::kInvalidArgument, "'aliases' must be an array"},
  };
  for (const Case& c : cases) {
    Result<ModelGeometry> m = ParseModelJson(c.json, "f.json");
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_EQ(m.status().code(), c.code) << m.status().ToString();
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("f.json"), std::string::npos) << m.status().message();
  }
}

TEST(ModelJsonTest, LoadFromFileAndResolve) {
  char path[] = "/tmp/dualpath_model_test_XXXXXX.json";
  const int fd = mkstemps(path, 5);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, kGoodJson, std::strlen(kGoodJson)),
            static_cast<ssize_t>(std::strlen(kGoodJson)));
  close(fd);
  Result<ModelGeometry> m = LoadModelJson(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->name, "my-gqa");
  Result<ModelGeometry> r = ResolveModel(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_layers, 4u);
  std::remove(path);
  // A model file the user named that is not there is bad input (docs/cli.md).
  EXPECT_EQ(LoadModelJson(path).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ResolveModel("/nonexistent/x.json").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ResolveModel("ds27b")->name, "ds27b");
  EXPECT_EQ(ResolveModel("nope").status().code(), Code::kKvUnknownModel);
}

}  // namespace
}  // namespace dualpath::kv
