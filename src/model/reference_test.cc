// Reference (teacher forcing) against independent one-call prefills, and ReferenceSession against
// Reference across an agent's turns, unrelated prompts, shorter prompts and bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "dualpath/model/ref_model.h"
#include "dualpath/model/reference_session.h"
#include "model/test_util.h"

namespace dualpath::model {
namespace {

using testing::PrefillOneCall;
using testing::RandomTokens;
using testing::SmallGqa;

std::vector<uint32_t> Concat(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  std::vector<uint32_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

class ReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::MakeModel(SmallGqa());
    ASSERT_NE(model_, nullptr);
  }
  std::span<const float> Row(const testing::PrefillResult& r, size_t pos) const {
    return std::span<const float>(r.logits).subspan(pos * 97, 97);
  }
  std::unique_ptr<RefModel> model_;
};

TEST_F(ReferenceTest, OneTokenIsArgmaxOfLastPromptToken) {
  const auto prompt = RandomTokens(15, 97, 1);
  const Generation g = Reference(*model_, prompt, {}, 1);
  const auto pre = PrefillOneCall(*model_, prompt);
  ASSERT_EQ(g.tokens.size(), 1u);
  EXPECT_EQ(g.tokens[0], RefModel::Argmax(Row(pre, 14)));
  EXPECT_EQ(g.first_logits_digest, RefModel::LogitsDigest(Row(pre, 14)));
}

TEST_F(ReferenceTest, TeacherForcedDecodeMatchesOnePrefillOfTheWholeSequence) {
  const auto prompt = RandomTokens(10, 97, 2);
  const auto teacher = RandomTokens(6, 97, 3);  // recorded outputs: not the model's choices
  const uint32_t gen = 6;
  std::vector<std::byte> kv;
  const Generation g = Reference(*model_, prompt, teacher, gen, &kv);
  // The decode steps see prompt + teacher[0, gen - 1): prefill all of it at once instead.
  const auto seq = Concat(prompt, std::span<const uint32_t>(teacher).first(gen - 1));
  const auto pre = PrefillOneCall(*model_, seq);
  ASSERT_EQ(g.tokens.size(), gen);
  for (uint32_t j = 0; j < gen; ++j) {
    EXPECT_EQ(g.tokens[j], RefModel::Argmax(Row(pre, prompt.size() - 1 + j))) << j;
  }
  EXPECT_EQ(g.first_logits_digest, RefModel::LogitsDigest(Row(pre, prompt.size() - 1)));
  ASSERT_EQ(kv.size(), pre.kv.size());
  EXPECT_EQ(std::memcmp(kv.data(), pre.kv.data(), kv.size()), 0);
}

TEST_F(ReferenceTest, TeacherTokensSteerLaterStepsOnly) {
  const auto prompt = RandomTokens(8, 97, 4);
  auto teacher = RandomTokens(4, 97, 5);
  const Generation base = Reference(*model_, prompt, teacher, 4);
  // teacher[3] is never fed (only gen - 1 = 3 decode inputs): no effect.
  auto t2 = teacher;
  t2[3] = (t2[3] + 1) % 97;
  EXPECT_EQ(Reference(*model_, prompt, t2, 4), base);
  // Changing teacher[0] cannot change the first token or its digest.
  auto t3 = teacher;
  t3[0] = (t3[0] + 1) % 97;
  const Generation other = Reference(*model_, prompt, t3, 4);
  EXPECT_EQ(other.tokens[0], base.tokens[0]);
  EXPECT_EQ(other.first_logits_digest, base.first_logits_digest);
}

TEST_F(ReferenceTest, GreedyEqualsReferenceFedWithItsOwnTokens) {
  const auto prompt = RandomTokens(9, 97, 13);
  const Generation g = Greedy(*model_, prompt, 7);
  ASSERT_EQ(g.tokens.size(), 7u);
  const std::vector<uint32_t> fed(g.tokens.begin(), g.tokens.end() - 1);
  EXPECT_EQ(Reference(*model_, prompt, fed, 7), g);
  EXPECT_EQ(Greedy(*model_, prompt, 0).first_logits_digest, g.first_logits_digest);
}

// A RefModel is shared read-only by an engine's threads: concurrent requests get the results
// they get alone (and the tsan preset checks the const methods for races).
TEST_F(ReferenceTest, ConcurrentCallsOnOneModelMatchSerialResults) {
  std::vector<std::vector<uint32_t>> prompts;
  std::vector<Generation> serial;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(RandomTokens(20 + 5 * i, 97, 300 + i));
    serial.push_back(Reference(*model_, prompts.back(), prompts.back(), 4));
  }
  std::vector<Generation> parallel(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { parallel[i] = Reference(*model_, prompts[i], prompts[i], 4); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(parallel, serial);
}

TEST_F(ReferenceTest, ZeroGenTokensIsPrefillOnly) {
  const auto prompt = RandomTokens(5, 97, 6);
  std::vector<std::byte> kv;
  const Generation g = Reference(*model_, prompt, {}, 0, &kv);
  EXPECT_TRUE(g.tokens.empty());
  EXPECT_EQ(g.first_logits_digest, Reference(*model_, prompt, {}, 1).first_logits_digest);
  EXPECT_EQ(kv.size(), 2 * 5 * model_->config().KvBytesPerTokenPerLayer());
}

TEST_F(ReferenceTest, SessionEqualsReferenceAcrossAnAgentsTurns) {
  std::mt19937_64 rng(7);
  ReferenceSession session(*model_);
  std::vector<uint32_t> prompt = RandomTokens(20, 97, 8);
  uint64_t expect_computed = 0;
  uint64_t expect_reused = 0;
  size_t prev_total = 0;
  for (int turn = 0; turn < 6; ++turn) {
    const uint32_t gen = 1 + rng() % 6;
    const auto teacher = RandomTokens(gen, 97, 100 + turn);
    const Generation want = Reference(*model_, prompt, teacher, gen);
    auto got = session.Run(prompt, teacher, gen);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, want) << "turn " << turn;

    // The session computed only what the previous turn lacked.
    const size_t total = prompt.size() + gen - 1;
    expect_computed += total - prev_total;
    expect_reused += prev_total;
    EXPECT_EQ(session.computed_tokens(), expect_computed) << "turn " << turn;
    EXPECT_EQ(session.reused_tokens(), expect_reused) << "turn " << turn;
    prev_total = total;

    // Next prompt: this one + the recorded outputs + an append (teacher forcing, docs/e2e.md).
    prompt = Concat(prompt, teacher);
    prompt = Concat(prompt, RandomTokens(1 + rng() % 9, 97, 200 + turn));
  }
  // The KV the session holds is the from-scratch KV of its sequence.
  std::vector<std::byte> kv;
  const auto seq = session.tokens();
  (void)Reference(*model_, seq, {}, 1, &kv);
  const size_t bpt = model_->config().KvBytesPerTokenPerLayer();
  for (uint32_t l = 0; l < 2; ++l) {
    ASSERT_EQ(session.layer_kv(l).size(), seq.size() * bpt);
    EXPECT_EQ(
        std::memcmp(session.layer_kv(l).data(), kv.data() + l * seq.size() * bpt, seq.size() * bpt),
        0);
  }
}

TEST_F(ReferenceTest, SessionHandlesUnrelatedShorterAndRepeatedPrompts) {
  ReferenceSession session(*model_);
  const auto p1 = RandomTokens(30, 97, 9);
  const auto teacher = RandomTokens(3, 97, 10);
  ASSERT_TRUE(session.Run(p1, teacher, 3).ok());

  // Unrelated: no common prefix at all.
  auto p2 = RandomTokens(12, 97, 11);
  p2[0] = (p1[0] + 1) % 97;
  const uint64_t reused_before = session.reused_tokens();
  auto g2 = session.Run(p2, teacher, 2);
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(*g2, Reference(*model_, p2, teacher, 2));
  EXPECT_EQ(session.reused_tokens(), reused_before);

  // Shorter prompt that is a prefix of what the session holds: reuse all but its last token.
  const auto p3 = std::vector<uint32_t>(p2.begin(), p2.begin() + 7);
  auto g3 = session.Run(p3, teacher, 3);
  ASSERT_TRUE(g3.ok());
  EXPECT_EQ(*g3, Reference(*model_, p3, teacher, 3));
  EXPECT_EQ(session.reused_tokens(), reused_before + 6);

  // The same request again, and with gen 0 and 1.
  for (uint32_t gen : {3u, 0u, 1u}) {
    auto g = session.Run(p3, teacher, gen);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(*g, Reference(*model_, p3, teacher, gen)) << gen;
  }
}

TEST_F(ReferenceTest, SessionRejectsBadInputAndKeepsItsState) {
  ReferenceSession session(*model_);
  const auto p = RandomTokens(10, 97, 12);
  ASSERT_TRUE(session.Run(p, {}, 1).ok());
  const std::vector<uint32_t> held(session.tokens().begin(), session.tokens().end());

  auto empty = session.Run({}, {}, 1);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("empty prompt"), std::string::npos);

  auto bad_token = p;
  bad_token[4] = 97;
  auto r = session.Run(bad_token, {}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("token id 97 at position 4"), std::string::npos);

  auto short_teacher = session.Run(p, std::vector<uint32_t>{1}, 3);
  ASSERT_FALSE(short_teacher.ok());
  EXPECT_NE(short_teacher.status().message().find("needs 2 teacher tokens, got 1"),
            std::string::npos);

  EXPECT_EQ(std::vector<uint32_t>(session.tokens().begin(), session.tokens().end()), held);
  session.Clear();
  EXPECT_TRUE(session.tokens().empty());
  auto after = session.Run(p, {}, 1);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, Reference(*model_, p, {}, 1));
}

}  // namespace
}  // namespace dualpath::model
