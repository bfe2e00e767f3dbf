#include "dualpath/kv/hasher.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>

#include "dualpath/kv/cbor.h"
#include "kv/sha256.h"
#include "kv/test_tokens.h"

namespace dualpath::kv {
namespace {

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xF];
  }
  return out;
}

BlockHasher MustCreate(HashAlgo algo, std::string_view seed, uint32_t block_size) {
  Result<BlockHasher> h = BlockHasher::Create(algo, seed, block_size);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return std::move(h).value();
}

// The vector tests run once per SHA-256 path (SHA-NI and the OpenSSL fallback), forced for the
// duration of each test.
class HasherVllmVectorsTest : public ::testing::TestWithParam<sha256::Impl> {
 protected:
  void SetUp() override {
    if (GetParam() == sha256::Impl::kShaNi && !sha256::HaveShaNi()) {
      GTEST_SKIP() << "CPU lacks SHA-NI";
    }
    sha256::ForceImpl(GetParam());
  }
  void TearDown() override { sha256::ResetImpl(); }
};

// Acceptance 2: byte-exact with vLLM's sha256_cbor chain for every committed vector (random
// sequences up to 10,000 tokens, ids up to 2^31-1, block sizes 16/64/256/512, seeds "0"/"42").
TEST_P(HasherVllmVectorsTest, EveryCaseMatches) {
  const nlohmann::json v = testing::LoadVectors();
  ASSERT_EQ(v["cases"].size(), 24u);
  std::set<std::pair<std::string, uint32_t>> covered;
  for (const auto& c : v["cases"]) {
    const std::string seed = c["seed"];
    const uint32_t bs = c["block_size"];
    SCOPED_TRACE("seed=" + seed + " block_size=" + std::to_string(bs) +
                 " mode=" + std::string(c["mode"]));
    const BlockHasher hasher = MustCreate(HashAlgo::kSha256Cbor, seed, bs);
    EXPECT_EQ(hasher.none_hash().Hex(), c["none_hash"]);
    const std::vector<TokenId> tokens =
        testing::MakeTokens(c["prng_seed"], c["num_tokens"], std::string(c["mode"]));
    const std::vector<BlockHash> got = hasher.HashPrefix(tokens);
    ASSERT_EQ(got.size(), c["hashes"].size());
    ASSERT_EQ(got.size(), tokens.size() / bs);  // only full blocks
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].Hex(), c["hashes"][i]) << "block " << i;
    }
    covered.insert({seed, bs});
  }
  EXPECT_EQ(covered.size(), 8u);  // 2 seeds x 4 block sizes
}

TEST_P(HasherVllmVectorsTest, NoneHashForSeeds) {
  const nlohmann::json v = testing::LoadVectors();
  for (const auto& [seed, hex] : v["seed_none_hash"].items()) {
    EXPECT_EQ(MustCreate(HashAlgo::kSha256Cbor, seed, 16).none_hash().Hex(), hex) << seed;
  }
}

// The CBOR bytes themselves, as cbor2.dumps(..., canonical=True) writes them, and the hash of a
// block with vLLM extra keys (cache salt / LoRA name as text strings).
TEST_P(HasherVllmVectorsTest, CborMessagesAndExtraKeys) {
  const nlohmann::json v = testing::LoadVectors();
  ASSERT_FALSE(v["messages"].empty());
  const BlockHasher hasher = MustCreate(HashAlgo::kSha256Cbor, "0", 16);
  for (const auto& m : v["messages"]) {
    const std::vector<TokenId> tokens = m["tokens"].get<std::vector<TokenId>>();
    const std::vector<std::string> extra = m["extra_keys"].get<std::vector<std::string>>();
    Result<BlockHash> parent = BlockHash::FromHex(std::string(m["parent"]));
    ASSERT_TRUE(parent.ok());

    std::string msg;
    cbor::AppendArrayHead(3, &msg);
    cbor::AppendBytes(std::string_view(reinterpret_cast<const char*>(parent->bytes.data()), 32),
                      &msg);
    cbor::AppendArrayHead(tokens.size(), &msg);
    for (TokenId t : tokens) cbor::AppendUnsigned(t, &msg);
    if (extra.empty()) {
      cbor::AppendNull(&msg);
    } else {
      cbor::AppendArrayHead(extra.size(), &msg);
      for (const std::string& e : extra) cbor::AppendText(e, &msg);
    }
    EXPECT_EQ(ToHex(msg), m["cbor"]);

    std::vector<std::string_view> extra_views(extra.begin(), extra.end());
    EXPECT_EQ(hasher.HashBlock(*parent, tokens, extra_views).Hex(), m["hash"]);
  }
}

INSTANTIATE_TEST_SUITE_P(Sha256Paths, HasherVllmVectorsTest,
                         ::testing::Values(sha256::Impl::kShaNi, sha256::Impl::kOpenSsl),
                         [](const ::testing::TestParamInfo<sha256::Impl>& p) {
                           return p.param == sha256::Impl::kShaNi ? "ShaNi" : "OpenSsl";
                         });

// Beyond the vectors: both paths agree on blocks whose message overflows the 2 KiB staging buffer
// (up to 1,000 tokens) and on extra keys long enough to be absorbed in several pieces.
TEST(HasherSha256PathsTest, ShaNiAndOpenSslAgree) {
  if (!sha256::HaveShaNi()) GTEST_SKIP() << "CPU lacks SHA-NI";
  std::mt19937_64 rng(99);
  const BlockHasher hasher = MustCreate(HashAlgo::kSha256Cbor, "0", 16);
  const std::string long_key(5000, 'k');
  for (int iter = 0; iter < 60; ++iter) {
    std::vector<TokenId> tokens(rng() % 1001);
    for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % (uint64_t{kMaxTokenId} + 1));
    BlockHash parent;
    for (uint8_t& b : parent.bytes) b = static_cast<uint8_t>(rng());
    std::vector<std::string_view> extra;
    if (iter % 3 == 1) extra = {"salt", std::string_view(long_key).substr(0, rng() % 5000)};
    sha256::ForceImpl(sha256::Impl::kShaNi);
    const BlockHash ni = hasher.HashBlock(parent, tokens, extra);
    sha256::ForceImpl(sha256::Impl::kOpenSsl);
    const BlockHash ossl = hasher.HashBlock(parent, tokens, extra);
    sha256::ResetImpl();
    ASSERT_EQ(ni, ossl) << "iteration " << iter << ", " << tokens.size() << " tokens";
  }
}

TEST(HasherTest, CreateRejectsBadBlockSize) {
  EXPECT_EQ(BlockHasher::Create(HashAlgo::kSha256Cbor, "0", 0).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(BlockHasher::Create(HashAlgo::kXxh3, "0", kMaxBlockSize + 1).status().code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(BlockHasher::Create(HashAlgo::kXxh3, "0", kMaxBlockSize).ok());
}

TEST(HasherTest, Accessors) {
  const BlockHasher h = MustCreate(HashAlgo::kXxh3, "seed", 64);
  EXPECT_EQ(h.algo(), HashAlgo::kXxh3);
  EXPECT_EQ(h.block_size(), 64u);
  EXPECT_EQ(h.seed(), "seed");
}

TEST(HasherTest, AlgoNames) {
  EXPECT_EQ(HashAlgoName(HashAlgo::kSha256Cbor), "sha256_cbor");
  EXPECT_EQ(HashAlgoName(HashAlgo::kXxh3), "xxh3");
  EXPECT_EQ(*ParseHashAlgo("sha256_cbor"), HashAlgo::kSha256Cbor);
  EXPECT_EQ(*ParseHashAlgo("xxh3"), HashAlgo::kXxh3);
  EXPECT_EQ(*ParseHashAlgo("xxh3_128"), HashAlgo::kXxh3);
  Result<HashAlgo> bad = ParseHashAlgo("sha256");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("sha256_cbor, xxh3"), std::string::npos);
}

class BothAlgosTest : public ::testing::TestWithParam<HashAlgo> {};

TEST_P(BothAlgosTest, ChainContinuesAcrossCalls) {
  const BlockHasher h = MustCreate(GetParam(), "42", 16);
  const std::vector<TokenId> tokens = testing::MakeTokens(7, 16 * 10 + 5, "mixed");
  const std::vector<BlockHash> whole = h.HashPrefix(tokens);
  ASSERT_EQ(whole.size(), 10u);
  // Hash the first 4 blocks, then continue from the 4th hash.
  std::vector<BlockHash> parts;
  h.HashBlocks(std::span(tokens).first(64), &parts);
  h.HashBlocks(parts.back(), std::span(tokens).subspan(64), &parts);
  EXPECT_EQ(parts, whole);
  // And block by block with HashBlock.
  BlockHash prev = h.none_hash();
  for (size_t b = 0; b < whole.size(); ++b) {
    prev = h.HashBlock(prev, std::span(tokens).subspan(b * 16, 16));
    EXPECT_EQ(prev, whole[b]) << b;
  }
}

TEST_P(BothAlgosTest, PartialTailIgnoredAndEmptyInput) {
  const BlockHasher h = MustCreate(GetParam(), "0", 64);
  std::vector<TokenId> tokens = testing::MakeTokens(3, 63, "vocab");
  EXPECT_TRUE(h.HashPrefix(tokens).empty());
  EXPECT_TRUE(h.HashPrefix({}).empty());
  tokens.push_back(5);
  EXPECT_EQ(h.HashPrefix(tokens).size(), 1u);
}

TEST_P(BothAlgosTest, SensitiveToEveryInput) {
  const std::vector<TokenId> tokens = testing::MakeTokens(11, 64, "full");
  const BlockHasher h0 = MustCreate(GetParam(), "0", 64);
  const BlockHasher h1 = MustCreate(GetParam(), "1", 64);
  const BlockHash base = h0.HashPrefix(tokens)[0];
  EXPECT_NE(h1.HashPrefix(tokens)[0], base);  // seed
  std::vector<TokenId> changed = tokens;
  changed[63] ^= 1;
  EXPECT_NE(h0.HashPrefix(changed)[0], base);  // last token
  BlockHash other_parent = h0.none_hash();
  other_parent.bytes[0] ^= 1;
  EXPECT_NE(h0.HashBlock(other_parent, tokens), base);  // parent
  const std::string_view salt[] = {"salt"};
  EXPECT_NE(h0.HashBlock(h0.none_hash(), tokens, salt), base);  // extra keys
  // Same prefix, different continuation: first block hash identical, second differs.
  std::vector<TokenId> a = testing::MakeTokens(5, 128, "vocab");
  std::vector<TokenId> b = a;
  b[100] += 1;
  const auto ha = h0.HashPrefix(a);
  const auto hb = h0.HashPrefix(b);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
}

TEST_P(BothAlgosTest, ConcurrentCallersAgree) {
  const BlockHasher h = MustCreate(GetParam(), "0", 16);
  const std::vector<TokenId> tokens = testing::MakeTokens(99, 4096, "mixed");
  const std::vector<BlockHash> want = h.HashPrefix(tokens);
  std::vector<std::vector<BlockHash>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) got[t] = h.HashPrefix(tokens);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

INSTANTIATE_TEST_SUITE_P(Algos, BothAlgosTest,
                         ::testing::Values(HashAlgo::kSha256Cbor, HashAlgo::kXxh3),
                         [](const auto& info) { return std::string(HashAlgoName(info.param)); });

TEST(HasherXxh3Test, DiffersFromShaAndUsesSixteenBytes) {
  const std::vector<TokenId> tokens = testing::MakeTokens(1, 64, "vocab");
  const BlockHash x = MustCreate(HashAlgo::kXxh3, "0", 64).HashPrefix(tokens)[0];
  const BlockHash s = MustCreate(HashAlgo::kSha256Cbor, "0", 64).HashPrefix(tokens)[0];
  EXPECT_NE(x, s);
  for (size_t i = 16; i < 32; ++i) EXPECT_EQ(x.bytes[i], 0) << i;
  EXPECT_FALSE(x.IsZero());
}

TEST(HasherTest, ExtraKeysAreLengthDelimited) {
  for (HashAlgo algo : {HashAlgo::kSha256Cbor, HashAlgo::kXxh3}) {
    const BlockHasher h = MustCreate(algo, "0", 4);
    const std::vector<TokenId> tokens = {1, 2, 3, 4};
    const std::string_view ab_c[] = {"ab", "c"};
    const std::string_view a_bc[] = {"a", "bc"};
    EXPECT_NE(h.HashBlock(h.none_hash(), tokens, ab_c), h.HashBlock(h.none_hash(), tokens, a_bc));
  }
}

TEST(HasherDeathTest, TokenAboveMaxAborts) {
  const BlockHasher h = MustCreate(HashAlgo::kSha256Cbor, "0", 2);
  const std::vector<TokenId> tokens = {1, kMaxTokenId + 1};
  EXPECT_DEATH((void)h.HashPrefix(tokens), "2\\^31-1");
}

TEST(ValidateTokensTest, NamesFirstBadToken) {
  EXPECT_TRUE(ValidateTokens(std::vector<TokenId>{0, kMaxTokenId}).ok());
  const Status s = ValidateTokens(std::vector<TokenId>{1, 2, kMaxTokenId + 1, 0xFFFFFFFF});
  EXPECT_EQ(s.code(), Code::kKvBadToken);
  EXPECT_NE(s.message().find("2147483648 at index 2"), std::string::npos) << s.message();
}

TEST(ParseTokenIdsTest, SeparatorsAndRange) {
  Result<std::vector<TokenId>> r = ParseTokenIds(" 1, 2,3\n4\t5\r\n,, 2147483647 0 ");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TokenId>{1, 2, 3, 4, 5, kMaxTokenId, 0}));
  EXPECT_TRUE(ParseTokenIds("").value().empty());
  EXPECT_TRUE(ParseTokenIds(" \n, ").value().empty());
  EXPECT_EQ(*ParseTokenIds("007"), (std::vector<TokenId>{7}));
}

TEST(ParseTokenIdsTest, BadTokensNamed) {
  struct Case {
    std::string_view input;
    std::string_view expect;
  };
  const Case cases[] = {
      {"1 -5", "negative token id '-5' (token #1)"},
      {"1 2 abc", "token 'abc' (token #2) is not an integer"},
      {"1.5", "token '1.5' (token #0) is not an integer"},
      {"+3", "token '+3' (token #0) is not an integer"},
      {"12x", "token '12x' (token #0) is not an integer"},
      {"2147483648", "token id 2147483648 (token #0) out of range"},
      {"99999999999999999999999", "out of range"},
  };
  for (const Case& c : cases) {
    Result<std::vector<TokenId>> r = ParseTokenIds(c.input);
    ASSERT_FALSE(r.ok()) << c.input;
    EXPECT_EQ(r.status().code(), Code::kKvBadToken) << c.input;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  // Long garbage is shortened in the message.
  Result<std::vector<TokenId>> r = ParseTokenIds(std::string(100, 'z'));
  EXPECT_LT(r.status().message().size(), 120u);
}

}  // namespace
}  // namespace dualpath::kv
