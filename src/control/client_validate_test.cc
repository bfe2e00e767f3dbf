// ValidateRequest: the one request check of the service (Submit) and the engines (admission).
#include <gtest/gtest.h>

#include <string>

#include "dualpath/control/client.h"

namespace dualpath::control {
namespace {

constexpr uint32_t kVocab = 512;

// Request 7: `prompt` tokens 1..n, `gen` tokens generated, gen - 1 teacher tokens.
v1::RequestSpec Spec(int prompt, uint32_t gen) {
  v1::RequestSpec s;
  s.set_request_id(7);
  for (int i = 0; i < prompt; ++i) s.add_prompt(static_cast<uint32_t>(i + 1));
  s.set_gen_tokens(gen);
  for (uint32_t i = 0; i + 1 < gen; ++i) s.add_teacher(i + 1);
  return s;
}

void ExpectBad(const v1::RequestSpec& s, const std::string& message) {
  const Status st = ValidateRequest(s, kVocab);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.message(), message);
}

TEST(ValidateRequestTest, AcceptsAWellFormedRequest) {
  EXPECT_TRUE(ValidateRequest(Spec(10, 5), kVocab).ok());
  EXPECT_TRUE(ValidateRequest(Spec(1, 1), kVocab).ok());  // one token, no teacher needed
  v1::RequestSpec top = Spec(3, 2);
  top.set_prompt(2, kVocab - 1);
  top.set_teacher(0, kVocab - 1);
  EXPECT_TRUE(ValidateRequest(top, kVocab).ok());
}

TEST(ValidateRequestTest, NamesEachProblem) {
  ExpectBad(Spec(0, 4), "request 7: empty prompt");
  ExpectBad(Spec(10, 0), "request 7: gen_tokens is 0 (must be >= 1)");
  v1::RequestSpec short_teacher = Spec(10, 5);
  short_teacher.mutable_teacher()->RemoveLast();
  ExpectBad(short_teacher, "request 7: teacher has 3 tokens, needs >= gen_tokens - 1 = 4");
  v1::RequestSpec big_prompt = Spec(10, 5);
  big_prompt.set_prompt(4, kVocab);
  ExpectBad(big_prompt, "request 7: prompt token 512 at position 4 >= vocab 512");
  v1::RequestSpec big_teacher = Spec(10, 5);
  big_teacher.set_teacher(2, 9999);
  ExpectBad(big_teacher, "request 7: teacher token 9999 at position 2 >= vocab 512");
}

TEST(ValidateRequestTest, ChecksEveryTeacherTokenAndTheFirstProblemWins) {
  // A teacher token beyond the gen_tokens - 1 the decode steps feed is still a token id.
  v1::RequestSpec extra = Spec(10, 2);
  extra.add_teacher(kVocab + 3);
  ExpectBad(extra, "request 7: teacher token 515 at position 1 >= vocab 512");
  // Empty prompt and gen_tokens 0 together: the prompt is named.
  ExpectBad(Spec(0, 0), "request 7: empty prompt");
  // A huge gen_tokens does not wrap the teacher count.
  v1::RequestSpec huge = Spec(10, 1);
  huge.set_gen_tokens(UINT32_MAX);
  ExpectBad(huge, "request 7: teacher has 0 tokens, needs >= gen_tokens - 1 = 4294967294");
  // Issue 25 item 7: the context and the teacher are bounded (what keeps a message in its limit).
  v1::RequestSpec longest = Spec(10, 1);
  longest.mutable_prompt()->Resize(static_cast<int>(kMaxRequestTokens) - 1, 1);
  longest.set_gen_tokens(1);
  EXPECT_TRUE(ValidateRequest(longest, kVocab).ok()) << "prompt + generated = the bound";
  longest.set_gen_tokens(2);
  longest.add_teacher(1);
  ExpectBad(
      longest,
      "request 7: 1048575 prompt + 2 generated tokens, more than kMaxRequestTokens = 1048576");
  v1::RequestSpec teacher = Spec(10, 1);
  teacher.mutable_teacher()->Resize(static_cast<int>(kMaxRequestTokens) + 1, 1);
  ExpectBad(teacher,
            "request 7: teacher has 1048577 tokens, more than kMaxRequestTokens = 1048576");
}

}  // namespace
}  // namespace dualpath::control
