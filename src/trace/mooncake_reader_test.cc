#include <gtest/gtest.h>

#include "dualpath/trace/workload.h"
#include "trace/test_util.h"

namespace dualpath::trace {
namespace {

using testing::SamplePath;
using testing::WriteScratch;

TEST(MooncakeReaderTest, ReadsShippedSample) {
  auto w = ReadMooncakeJsonl(SamplePath("mooncake/conversation_trace_head200.jsonl"));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->sessions.size(), 200u);
  // First line: {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0..13]}
  const Session& s0 = w->sessions[0];
  ASSERT_EQ(s0.turns.size(), 1u);
  EXPECT_EQ(s0.block_size, 512u);
  EXPECT_EQ(s0.turns[0].append_tokens, 6758u);
  EXPECT_EQ(s0.turns[0].gen_tokens, 500u);
  EXPECT_EQ(s0.turns[0].arrival_s, 0.0);
  EXPECT_EQ(s0.turns[0].hash_ids.size(), 14u);
  double last = 0;
  for (const Session& s : w->sessions) {
    // Open loop: every request is its own arrival, and the file is in timestamp order.
    EXPECT_GE(s.turns[0].arrival_s, last);
    last = s.turns[0].arrival_s;
    EXPECT_EQ(s.start_s, s.turns[0].arrival_s);
    EXPECT_EQ(s.turns[0].hash_ids.size(), (s.turns[0].append_tokens + 511) / 512);
  }
  // Lines 1-3 share hash id 0 as their first block: lines 2 and 3 hit one block each.
  Workload first3 = *w;
  first3.sessions.resize(3);
  const WorkloadStats st = ComputeStats(first3, 64);
  EXPECT_EQ(st.hit_blocks, 2u);
  EXPECT_EQ(st.hit_tokens, 1024u);
}

void ExpectMalformed(const std::string& content, const std::string& want_in_message) {
  const std::string path = WriteScratch("bad.jsonl", content);
  auto w = ReadMooncakeJsonl(path);
  ASSERT_FALSE(w.ok()) << "accepted: " << content;
  EXPECT_EQ(w.status().code(), Code::kTraceMalformed);
  EXPECT_NE(w.status().message().find(want_in_message), std::string::npos) << w.status().message();
}

constexpr const char* kGood =
    R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})"
    "\n";

TEST(MooncakeReaderTest, MalformedInputNamesFileLineAndField) {
  ExpectMalformed(std::string(kGood) + kGood + "{not json\n", "bad.jsonl:3: not valid JSON");
  ExpectMalformed(std::string(kGood) + R"({"timestamp": 0, "output_length": 5, "hash_ids": [1]})",
                  "bad.jsonl:2: missing field \"input_length\"");
  ExpectMalformed(R"({"timestamp": 0, "input_length": -600, "output_length": 5, "hash_ids": [1]})",
                  ":1: field \"input_length\" must be a non-negative integer, got -600");
  ExpectMalformed(
      R"({"timestamp": 0, "input_length": 600, "output_length": 2.5, "hash_ids": [1, 2]})",
      "field \"output_length\" must be a non-negative integer");
  ExpectMalformed(
      R"({"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})",
      "field \"timestamp\" = -1 is outside [0, 1000000000] ms");
  // Issue 19: 2^64-1 output tokens were accepted and wrapped; times of 1e308 gave a JCT of inf.
  ExpectMalformed(
      R"({"timestamp": 0, "input_length": 600, "output_length": 18446744073709551615,)"
      R"( "hash_ids": [1, 2]})",
      ":1: field \"output_length\" = 18446744073709551615 is outside [0, 1073741824] tokens");
  ExpectMalformed(
      R"({"timestamp": 1e308, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})",
      "field \"timestamp\" = 1e+308 is outside");
  ExpectMalformed(
      R"({"timestamp": 0, "input_length": 1073741825, "output_length": 5, "hash_ids": []})",
      "field \"input_length\" = 1073741825 is outside [1, 1073741824] tokens");
  ExpectMalformed(R"({"timestamp": 1e999, "input_length": 1, "output_length": 5, "hash_ids": [1]})",
                  ":1: not valid JSON");
  ExpectMalformed(R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]})",
                  "hash_ids has 1 entries, want ceil(input_length/512) = 2");
  ExpectMalformed(
      R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]})",
      "field \"hash_ids\"[1] must be a non-negative integer");
  ExpectMalformed("[1, 2]\n", ":1: expected a JSON object");
  ExpectMalformed("\n\n", "no requests");
}

TEST(MooncakeReaderTest, BlankLinesAreSkippedAndMissingFileIsBadInput) {
  auto w = ReadMooncakeJsonl(WriteScratch("blank.jsonl", std::string("\n") + kGood + "\n"));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->sessions.size(), 1u);
  auto missing = ReadMooncakeJsonl("/nonexistent/trace.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::trace
