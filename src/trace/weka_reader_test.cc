#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "dualpath/trace/workload.h"
#include "trace/test_util.h"

namespace dualpath::trace {
namespace {

using testing::SamplePath;
using testing::WriteScratch;

// The recorded requests of every agent in file order (parent first, then sub-agents depth-first
// in the order they are met), straight from the JSON.
void CollectAgents(const nlohmann::json& requests, std::vector<std::vector<nlohmann::json>>& out) {
  const size_t index = out.size();
  out.emplace_back();
  for (const auto& r : requests) {
    if (r.value("type", "") == "subagent") {
      CollectAgents(r["requests"], out);
    } else {
      out[index].push_back(r);
    }
  }
}

// Replay must reproduce every recorded prompt length exactly, including where Claude Code's
// context shrank (dropped thinking, compaction), and keep the recorded generation lengths.
TEST(WekaReaderTest, ReplayReproducesRecordedPromptsOfEverySample) {
  for (const char* name :
       {"trace_0036.json", "trace_0057.json", "trace_0167.json", "trace_0282.json"}) {
    const std::string path = SamplePath(std::string("weka-claude-code/") + name);
    auto w = ReadWekaSession(path);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    std::ifstream in(path);
    const nlohmann::json doc = nlohmann::json::parse(in);
    std::vector<std::vector<nlohmann::json>> agents;
    CollectAgents(doc["requests"], agents);
    ASSERT_EQ(w->sessions.size(), agents.size()) << name;
    for (size_t a = 0; a < agents.size(); ++a) {
      const Session& s = w->sessions[a];
      ASSERT_EQ(s.turns.size(), agents[a].size()) << name;
      for (size_t i = 0; i < s.turns.size(); ++i) {
        EXPECT_EQ(PromptTokens(s, i), agents[a][i]["in"].get<uint64_t>()) << name << " turn " << i;
        EXPECT_EQ(s.turns[i].gen_tokens, agents[a][i]["out"].get<uint64_t>());
        EXPECT_EQ(s.turns[i].think_time_s, agents[a][i]["think_time"].get<double>());
        EXPECT_EQ(s.turns[i].arrival_s, -1.0);  // closed loop
      }
    }
  }
}

TEST(WekaReaderTest, SubAgentsBecomeChildSessionsSharingTheHashNamespace) {
  auto w = ReadWekaSession(SamplePath("weka-claude-code/trace_0282.json"));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->sessions.size(), 4u);
  const Session& parent = w->sessions[0];
  EXPECT_EQ(parent.parent_id, kNoParent);
  EXPECT_EQ(parent.block_size, 64u);
  const double starts[] = {272.112, 274.021, 350.264};
  for (size_t k = 1; k <= 3; ++k) {
    const Session& sub = w->sessions[k];
    EXPECT_EQ(sub.id, k);
    EXPECT_EQ(sub.parent_id, 0u);
    EXPECT_EQ(sub.parent_turn, 1u);  // launched after the parent's second request
    EXPECT_DOUBLE_EQ(sub.start_s, starts[k - 1]);
  }
  // The sub-agents start with the same system prompt blocks: shared namespace, cross-session hits.
  EXPECT_EQ(w->sessions[1].turns[0].hash_ids[0], w->sessions[2].turns[0].hash_ids[0]);
  const Session& first = w->sessions[1];
  const Session& second = w->sessions[2];
  const uint64_t alone = ComputeStats(Workload{.sessions = {first}}, 64).hit_tokens +
                         ComputeStats(Workload{.sessions = {second}}, 64).hit_tokens;
  EXPECT_GT(ComputeStats(Workload{.sessions = {first, second}}, 64).hit_tokens, alone);
}

TEST(WekaReaderTest, DirectoryGivesEachFileItsOwnNamespace) {
  auto dir = ReadWekaDir(SamplePath("weka-claude-code"));
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_EQ(dir->sessions.size(), 1u + 1u + 1u + 4u);
  for (size_t i = 0; i < dir->sessions.size(); ++i) {
    EXPECT_EQ(dir->sessions[i].id, i);
  }
  // trace_0036 and trace_0057 both number their blocks from 1; in a directory they must differ.
  auto a = ReadWekaSession(SamplePath("weka-claude-code/trace_0036.json"));
  auto b = ReadWekaSession(SamplePath("weka-claude-code/trace_0057.json"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->sessions[0].turns[0].hash_ids[0], b->sessions[0].turns[0].hash_ids[0]);
  EXPECT_NE(dir->sessions[0].turns[0].hash_ids[0], dir->sessions[1].turns[0].hash_ids[0]);
  // Files do not hit each other's blocks: the directory's hits are the sum of the files'.
  uint64_t sum = 0;
  for (const char* name :
       {"trace_0036.json", "trace_0057.json", "trace_0167.json", "trace_0282.json"}) {
    auto f = ReadWekaSession(SamplePath(std::string("weka-claude-code/") + name));
    ASSERT_TRUE(f.ok());
    sum += ComputeStats(*f, 64).hit_tokens;
  }
  EXPECT_EQ(ComputeStats(*dir, 64).hit_tokens, sum);
}

void ExpectMalformed(const std::string& content, const std::string& want_in_message) {
  const std::string path = WriteScratch("bad.json", content);
  auto w = ReadWekaSession(path);
  ASSERT_FALSE(w.ok()) << "accepted: " << content;
  EXPECT_EQ(w.status().code(), Code::kTraceMalformed);
  EXPECT_NE(w.status().message().find(want_in_message), std::string::npos) << w.status().message();
}

TEST(WekaReaderTest, MalformedInputNamesFileAndLocation) {
  ExpectMalformed("{\"block_size\": 64,\n \"requests\": [}",
                  "bad.json: not valid JSON: parse error at line 2");
  ExpectMalformed(R"({"requests": []})", "missing field \"block_size\"");
  ExpectMalformed(R"({"block_size": 64, "requests": []})", "agent has no requests");
  ExpectMalformed(
      R"({"block_size": 64, "requests": [{"t": 0, "type": "n", "out": 1, "hash_ids": []}]})",
      "bad.json:/requests/0: missing field \"in\"");
  ExpectMalformed(
      R"({"block_size": 64, "requests": [{"t": 0, "type": "n", "in": 64, "out": 1, "hash_ids": [1]},
          {"t": 1, "type": "subagent", "requests": [{"t": 0, "in": 64, "out": -3, "hash_ids": [2]}]}]})",
      "bad.json:/requests/1/requests/0: field \"out\" must be a non-negative integer, got -3");
  ExpectMalformed(
      R"({"block_size": 64, "requests": [{"t": 0, "in": 640, "out": 1, "hash_ids": [1]}]})",
      "hash_ids has 1 entries for in=640 tokens, want 10 blocks of 64");
  ExpectMalformed(R"({"block_size": 64, "requests": [{"t": 0, "type": "subagent"}]})",
                  "subagent without \"requests\"");
  std::string deep = R"({"t": 0, "in": 64, "out": 1, "hash_ids": [1]})";
  for (int i = 0; i < 20; ++i) {
    deep = R"({"t": 0, "type": "subagent", "requests": [)" + deep + "]}";
  }
  ExpectMalformed(R"({"block_size": 64, "requests": [)" + deep + "]}", "nested deeper than 16");
}

// Issue 19: every number has a range checked where it is parsed (docs/trace.md "Input ranges").
TEST(WekaReaderTest, NumbersOutsideTheirRangesNameTheField) {
  auto one = [](const std::string& fields) {
    return R"({"block_size": 64, "requests": [{"type": "n", "hash_ids": [1], )" + fields + "}]}";
  };
  ExpectMalformed(
      one(R"("t": 0, "in": 64, "out": 1, "think_time": 1e8)"),
      "bad.json:/requests/0: field \"think_time\" = 100000000 is outside [0, 1000000] s");
  ExpectMalformed(one(R"("t": 0, "in": 64, "out": 1, "think_time": 1e12)"),
                  "field \"think_time\" = 1000000000000 is outside");
  ExpectMalformed(one(R"("t": 1e308, "in": 64, "out": 1)"),
                  "field \"t\" = 1e+308 is outside [0, 1000000] s");
  ExpectMalformed(one(R"("t": 0, "in": 64, "out": 18446744073709551615)"),
                  "field \"out\" = 18446744073709551615 is outside [0, 1073741824] tokens");
  ExpectMalformed(one(R"("t": 0, "in": 0, "out": 1)"), "field \"in\" = 0 is outside [1, ");
  ExpectMalformed(one(R"("t": 0, "in": 64, "out": 1, "think_time": 1e999)"),
                  "not valid JSON: number overflow");
  ExpectMalformed(R"({"block_size": 0, "requests": []})",
                  "field \"block_size\" = 0 is outside [1, 1048576] tokens");
  // The ceilings themselves are fine.
  const std::string ok =
      WriteScratch("ok.json", one(R"("t": 1e6, "in": 64, "out": 1073741824, "think_time": 1e6)"));
  auto w = ReadWekaSession(ok);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->sessions[0].turns[0].think_time_s, 1e6);
}

TEST(WekaReaderTest, MissingInputsAreNotFound) {
  EXPECT_EQ(ReadWekaSession("/nonexistent/trace_0001.json").status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(ReadWekaDir("/nonexistent").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace dualpath::trace
