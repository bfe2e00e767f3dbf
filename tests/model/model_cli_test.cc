// System test: the real `dualpath` binary's `model` subcommands. A generation computed in another
// process (the CLI) has exactly the tokens and logits digest that Reference / Greedy compute in
// this one: the cross-process bit identity the engines and the replayer's checker rely on. Also
// the CLI's bad-input contract (one stderr line, exit status 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/model/ref_model.h"
#include "lib/cli_fixture.h"

namespace dualpath::model {
namespace {

using cli_testing::CliResult;

class ModelCliTest : public cli_testing::CliTest {};

constexpr const char* kSpec =
    "layers=3,q_heads=4,kv_heads=2,head_dim=16,ffn_dim=64,vocab=500,seed=9";

std::unique_ptr<RefModel> Model() {
  return std::move(RefModel::Create(*RefModelConfig::Parse(kSpec))).value();
}

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

TEST_F(ModelCliTest, TeacherForcedGenerationMatchesReferenceInThisProcess) {
  const CliResult r = Run(std::string("model generate --spec ") + kSpec +
                          " --prompt-len 40 --gen 6 --seed 4 --teacher random --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto prompt = j.at("prompt").get<std::vector<uint32_t>>();
  const auto teacher = j.at("teacher").get<std::vector<uint32_t>>();
  ASSERT_EQ(prompt.size(), 40u);
  ASSERT_EQ(teacher.size(), 5u);
  const Generation want = Reference(*Model(), prompt, teacher, 6);
  EXPECT_EQ(j.at("tokens").get<std::vector<uint32_t>>(), want.tokens);
  EXPECT_EQ(j.at("first_logits_digest").get<std::string>(), Hex64(want.first_logits_digest));
}

TEST_F(ModelCliTest, GreedyFromExplicitTokensMatchesGreedyInThisProcess) {
  const CliResult r = Run(std::string("model generate --spec ") + kSpec +
                          " --prompt-tokens 7,8,9,499 --gen 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::vector<uint32_t> prompt = {7, 8, 9, 499};
  EXPECT_EQ(j.at("prompt").get<std::vector<uint32_t>>(), prompt);
  const Generation want = Greedy(*Model(), prompt, 4);
  EXPECT_EQ(j.at("tokens").get<std::vector<uint32_t>>(), want.tokens);
  EXPECT_EQ(j.at("first_logits_digest").get<std::string>(), Hex64(want.first_logits_digest));
}

TEST_F(ModelCliTest, InfoPrintsGeometry) {
  const CliResult r = Run(std::string("model info --json --spec ") + kSpec);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const RefModelConfig c = *RefModelConfig::Parse(kSpec);
  EXPECT_EQ(j.at("kv_bytes_per_token_per_layer").get<uint64_t>(), c.KvBytesPerTokenPerLayer());
  EXPECT_EQ(j.at("kv_bytes_per_token").get<uint64_t>(), c.KvBytesPerTokenPerLayer() * 3);
  EXPECT_EQ(j.at("parameters").get<uint64_t>(), c.ParameterCount());
  EXPECT_EQ(j.at("attention").get<std::string>(), "gqa");
  const CliResult text = Run("model info");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("8192 bytes all layers"), std::string::npos) << text.out;
}

// Across processes AND instruction sets: the child is forced onto the baseline (SSE) kernels, this
// process uses the default selection (AVX2 where the CPU has it; then the test compares the two
// paths, with head_dim 32 for the AVX2 path's unrolled kernels).
TEST_F(ModelCliTest, BaselineChildMatchesThisProcessOnTheDefaultPath) {
  const std::string spec = "layers=2,q_heads=4,kv_heads=4,head_dim=32,ffn_dim=96,vocab=300,seed=5";
  const CliResult r = RunWithEnv("DUALPATH_MODEL_ISA=baseline ",
                                 "model generate --spec " + spec +
                                     " --prompt-len 45 --gen 5 --seed 6 --teacher random --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  auto model = std::move(RefModel::Create(*RefModelConfig::Parse(spec))).value();
  const Generation want = Reference(*model, j.at("prompt").get<std::vector<uint32_t>>(),
                                    j.at("teacher").get<std::vector<uint32_t>>(), 5);
  EXPECT_EQ(j.at("tokens").get<std::vector<uint32_t>>(), want.tokens) << model->isa();
  EXPECT_EQ(j.at("first_logits_digest").get<std::string>(), Hex64(want.first_logits_digest));

  const CliResult bad = RunWithEnv("DUALPATH_MODEL_ISA=avx9 ", "model generate --prompt-len 3");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(bad.out.empty());
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_NE(bad.err.find("DUALPATH_MODEL_ISA"), std::string::npos) << bad.err;
}

TEST_F(ModelCliTest, BadInputExitsTwoWithOneLine) {
  for (const char* args : {"model info --spec layers=0", "model info --spec q_heads=4,kv_heads=3",
                           "model generate --prompt-len 0", "model generate --prompt-tokens 1,5000",
                           "model generate --prompt-len 3 --teacher nope",
                           "model generate --spec bogus=1 --prompt-len 2",
                           "model generate --prompt-len 3 --prompt-tokens 1,2"}) {
    ExpectBadInput(args, "", "");
  }
}

// Issue 19: every numeric flag's range is checked where it is parsed and named in the one line
// (docs/model.md "Input ranges").
TEST_F(ModelCliTest, OutOfRangeNumbersNameTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"model generate --prompt-len 2000000", "--prompt-len = 2000000 is outside [1, 1000000]"},
      {"model generate --prompt-len -4", "--prompt-len = -4 is outside [1, 1000000]"},
      {"model generate --prompt-len 3 --gen 100001", "--gen = 100001 is outside [0, 100000]"},
      {"model generate --prompt-len 3 --gen -1", "--gen = -1 is outside [0, 100000]"},
  };
  for (const auto& [args, want] : cases) ExpectBadInput(args, "", want);
}

}  // namespace
}  // namespace dualpath::model
