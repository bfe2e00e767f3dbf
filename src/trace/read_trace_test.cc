#include <gtest/gtest.h>

#include "dualpath/trace/workload.h"
#include "trace/test_util.h"

namespace dualpath::trace {
namespace {

using testing::SamplePath;
using testing::WriteScratch;

TEST(ReadTraceTest, PicksTheReaderByPath) {
  auto dir = ReadTrace(SamplePath("weka-claude-code"));
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->sessions.size(), 7u);
  auto one = ReadTrace(SamplePath("weka-claude-code/trace_0282.json"));
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->sessions.size(), 4u);
  auto mooncake = ReadTrace(SamplePath("mooncake/conversation_trace_head200.jsonl"));
  ASSERT_TRUE(mooncake.ok()) << mooncake.status().ToString();
  EXPECT_EQ(mooncake->sessions.size(), 200u);
  EXPECT_EQ(mooncake->sessions[0].block_size, 512u);
}

TEST(ReadTraceTest, ExplicitFormatOverridesTheExtension) {
  // A Mooncake file under a .txt name: the guess fails, the explicit format reads it.
  const std::string path = WriteScratch(
      "requests.txt", R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [3]})"
                      "\n");
  EXPECT_EQ(ReadTrace(path).status().code(), Code::kInvalidArgument);
  auto w = ReadTrace(path, "mooncake");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->sessions.size(), 1u);
  // The wrong explicit format is a malformed trace, not a crash.
  EXPECT_EQ(ReadTrace(path, "weka").status().code(), Code::kTraceMalformed);
  EXPECT_EQ(ReadTrace(path, "csv").status().code(), Code::kInvalidArgument);
}

TEST(ReadTraceTest, MissingPathIsNotFound) {
  EXPECT_EQ(ReadTrace("/nonexistent/x.jsonl").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::trace
