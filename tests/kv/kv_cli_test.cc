// System test: runs the real `dualpath` binary for the kv subcommands. Acceptance 2 (CLI output
// byte-exact with vLLM's sha256_cbor chain for every committed vector) and the CLI's bad-input
// contract (one clear stderr line, exit status 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "dualpath/kv/block_file.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/kv/model.h"
#include "kv/test_tokens.h"
#include "lib/cli_fixture.h"

namespace dualpath::kv {
namespace {

using cli_testing::CliResult;
using cli_testing::ReadWholeFile;

class KvCliTest : public cli_testing::CliTest {};

// Formats tokens with every separator the CLI accepts.
std::string FormatTokens(const std::vector<TokenId>& tokens) {
  std::string s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    s += std::to_string(tokens[i]);
    s += (i % 13 == 12) ? "\n" : (i % 5 == 4) ? ", " : (i % 7 == 6) ? "," : " ";
  }
  return s;
}

TEST_F(KvCliTest, HashMatchesVllmVectors) {
  const nlohmann::json v = testing::LoadVectors();
  int checked = 0;
  for (const auto& c : v["cases"]) {
    const std::vector<TokenId> tokens =
        testing::MakeTokens(c["prng_seed"], c["num_tokens"], std::string(c["mode"]));
    const std::string args = "kv hash --seed " + std::string(c["seed"]) + " --block-size " +
                             std::to_string(int(c["block_size"]));
    SCOPED_TRACE(args);
    const CliResult r = Run(args, FormatTokens(tokens));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string want;
    for (const auto& h : c["hashes"]) want += std::string(h) + "\n";
    EXPECT_EQ(r.out, want);
    ++checked;
  }
  EXPECT_EQ(checked, 24);
}

TEST_F(KvCliTest, Xxh3ModeAgreesWithLibrary) {
  const std::vector<TokenId> tokens = testing::MakeTokens(5, 1000, "vocab");
  const CliResult r = Run("kv hash --seed 42 --block-size 64 --algo xxh3", FormatTokens(tokens));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string want;
  for (const BlockHash& h :
       BlockHasher::Create(HashAlgo::kXxh3, "42", 64).value().HashPrefix(tokens)) {
    want += h.Hex() + "\n";
  }
  EXPECT_EQ(r.out, want);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1000 / 64);
}

TEST_F(KvCliTest, HashBadInput) {
  const std::string hash = "kv hash --seed 0 --block-size 16";
  ExpectBadInput(hash, "1 2 three 4", "token 'three' (token #2) is not an integer");
  ExpectBadInput(hash, "1, -7", "negative token id '-7'");
  ExpectBadInput(hash, "2147483648", "out of range: ids must be <= 2147483647");
  ExpectBadInput(hash, "1.0", "is not an integer");
  // Issue 19: the range message names the flag, the value and the range (docs/kv.md).
  ExpectBadInput("kv hash --seed 0 --block-size 0", "1 2",
                 "--block-size = 0 is outside [1, 1048576] tokens");
  ExpectBadInput("kv hash --seed 0 --block-size -3", "1 2",
                 "--block-size = -3 is outside [1, 1048576] tokens");
  ExpectBadInput("kv hash --seed 0 --block-size 4000000000", "1 2",
                 "--block-size = 4000000000 is outside [1, 1048576] tokens");
  ExpectBadInput("kv hash --seed 0 --block-size 16 --algo md5", "1",
                 "unknown hash algorithm 'md5'");
}

TEST_F(KvCliTest, HashEmptyInputPrintsNothing) {
  const CliResult r = Run("kv hash --seed 0 --block-size 16", "");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty());
}

TEST_F(KvCliTest, HashSample) {
  const CliResult r = Run("kv hash --seed 0 --block-size 64",
                          ReadWholeFile(testing::SourcePath("data/samples/tokens_1k.txt")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1000 / 64);
}

TEST_F(KvCliTest, ModelsListsPresetsWithKvBytes) {
  const CliResult r = Run("kv models", "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const ModelGeometry& m : ModelPresets()) {
    EXPECT_NE(r.out.find(m.name), std::string::npos) << m.name;
    EXPECT_NE(r.out.find(std::to_string(m.KvBytesPerToken())), std::string::npos) << m.name;
  }
  ExpectBadInput("kv models llama-70b", "", "unknown model 'llama-70b'");
  ExpectBadInput("kv models " + dir() + "/missing.json", "", "missing.json");
}

TEST_F(KvCliTest, ModelsAcceptsJsonFile) {
  const std::string path = dir() + "/m.json";
  std::ofstream(path) << R"({"name":"cli-gqa","attention":"gqa","num_layers":10,"num_heads":8,
      "num_kv_heads":4,"head_dim":64,"params_active_non_embedding":1e9})";
  const CliResult r = Run("kv models " + path, "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cli-gqa"), std::string::npos);
  EXPECT_NE(r.out.find(std::to_string(10 * 2 * 4 * 64 * 2)), std::string::npos) << r.out;
  std::ofstream(path) << R"({"name":"x","attention":"gqa"})";
  ExpectBadInput("kv models " + path, "", "'num_layers' missing");
}

// Issue 19: geometry so large that KV bytes per token overflow 64 bits was printed wrapped. Every
// dimension has a range (docs/models.md "Input ranges"), checked where the JSON is parsed.
TEST_F(KvCliTest, ModelsRefusesGeometryOutsideItsRanges) {
  const std::string path = dir() + "/huge.json";
  std::ofstream(path) << R"({"name":"huge","attention":"gqa","num_layers":4294967295,
      "num_heads":4294967295,"num_kv_heads":4294967295,"head_dim":4294967295,
      "params_active_non_embedding":1})";
  ExpectBadInput("kv models " + path, "", "key 'num_layers' = 4294967295 is outside [1, 4096]");
  std::ofstream(path) << R"({"name":"huge","attention":"gqa","num_layers":4096,"num_heads":8,
      "num_kv_heads":8,"head_dim":8,"kv_bytes_per_token_per_layer":18446744073709551615,
      "params_active_non_embedding":1})";
  ExpectBadInput("kv models " + path, "",
                 "key 'kv_bytes_per_token_per_layer' = 18446744073709551615");
  std::ofstream(path) << R"({"name":"huge","attention":"gqa","num_layers":8,"num_heads":8,
      "num_kv_heads":8,"head_dim":8,"params_active_non_embedding":1e308})";
  ExpectBadInput("kv models " + path, "", "key 'params_active_non_embedding' = 1e+308 is outside");
  // The largest geometry in range prints its exact KV bytes per token: 4096 layers x 2 x 65536
  // heads x 65536 dims x 4 bytes = 2^47, no wrap.
  std::ofstream(path) << R"({"name":"max","attention":"mha","num_layers":4096,"num_heads":65536,
      "head_dim":65536,"kv_dtype":"fp32","params_active_non_embedding":1e15})";
  const CliResult r = Run("kv models " + path, "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(uint64_t{1} << 47)), std::string::npos) << r.out;
}

TEST_F(KvCliTest, InspectVerifiesAndReportsCorruption) {
  const ModelGeometry m = *FindModel("r1-llama-8b");
  BlockFileMeta meta;
  meta.model_fingerprint = ModelFingerprint(m);
  meta.block_hash.bytes.fill(0xAB);
  meta.token_count = 16;
  meta.num_layers = m.num_layers;
  meta.bytes_per_token_per_layer = m.kv_bytes_per_token_per_layer;
  std::vector<std::byte> payload(meta.PayloadBytes(), std::byte{0x5A});
  std::vector<std::byte> file(BlockFileSize(payload.size()));
  ASSERT_TRUE(EncodeBlockFile(meta, payload, file).ok());
  const std::string path = dir() + "/block";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));

  CliResult r =
      Run("kv inspect " + path + " --model r1-llama-8b --hash " + meta.block_hash.Hex(), "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("verified ok"), std::string::npos);
  EXPECT_NE(r.out.find("tokens 16"), std::string::npos);

  r = Run("kv inspect " + path + " --model qwen3-32b", "");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("kKvFingerprintMismatch"), std::string::npos) << r.err;

  file[kBlockFileHeaderBytes + 100] ^= std::byte{1};
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  r = Run("kv inspect " + path, "");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("kKvChecksumMismatch"), std::string::npos) << r.err;

  ExpectBadInput("kv inspect " + path + " --hash xyz", "", "expected 64 hex characters");
}

}  // namespace
}  // namespace dualpath::kv
