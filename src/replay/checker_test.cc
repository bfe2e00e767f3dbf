#include "dualpath/replay/checker.h"

#include <gtest/gtest.h>

namespace dualpath::replay {
namespace {

// A small model and workload so the from-scratch comparison stays fast under ASan.
model::RefModelConfig SmallConfig() {
  Result<model::RefModelConfig> c =
      model::RefModelConfig::Parse("layers=2,q_heads=2,kv_heads=1,head_dim=8,ffn_dim=32,vocab=512");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

ReplayWorkload SmallWorkload(uint32_t vocab) {
  WorkloadOptions o;
  o.agents = 3;
  o.turns = 3;
  o.max_context = 256;
  o.append = 8;
  o.gen = 4;
  o.vocab = vocab;
  Result<ReplayWorkload> w = BuildWorkload(o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return *w;
}

// Records as a correct engine would report them.
std::vector<RequestRecord> Correct(const ReplayWorkload& w, const References& refs) {
  std::vector<RequestRecord> out;
  uint64_t id = 1;
  for (size_t a = 0; a < w.agents.size(); ++a) {
    for (size_t t = 0; t < w.agents[a].turns.size(); ++t) {
      RequestRecord r;
      r.request_id = id++;
      r.agent = w.agents[a].id;
      r.turn = static_cast<uint32_t>(t);
      r.result.set_ok(true);
      r.result.set_first_logits_digest(refs[a][t].first_logits_digest);
      for (uint32_t tok : refs[a][t].tokens) r.result.add_generated(tok);
      out.push_back(r);
    }
  }
  return out;
}

TEST(CheckerTest, ReferencesEqualFromScratchReference) {
  const model::RefModelConfig cfg = SmallConfig();
  auto m = model::RefModel::Create(cfg);
  ASSERT_TRUE(m.ok());
  const ReplayWorkload w = SmallWorkload(cfg.vocab);
  Result<References> refs = ComputeReferences(w, **m, 2);
  ASSERT_TRUE(refs.ok()) << refs.status().ToString();
  ASSERT_EQ(refs->size(), w.agents.size());
  for (size_t a = 0; a < w.agents.size(); ++a) {
    ASSERT_EQ((*refs)[a].size(), w.agents[a].turns.size());
    for (size_t t = 0; t < w.agents[a].turns.size(); ++t) {
      const TurnSpec& turn = w.agents[a].turns[t];
      const model::Generation scratch =
          model::Reference(**m, turn.prompt, turn.teacher, turn.gen_tokens);
      EXPECT_EQ((*refs)[a][t], scratch) << "agent " << a << " turn " << t;
      EXPECT_EQ(scratch.tokens.size(), turn.gen_tokens);
    }
  }
  // Thread count does not change the answer.
  Result<References> one = ComputeReferences(w, **m, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, *refs);
}

TEST(CheckerTest, CountsMismatchesOfTokensAndDigest) {
  const model::RefModelConfig cfg = SmallConfig();
  auto m = model::RefModel::Create(cfg);
  ASSERT_TRUE(m.ok());
  const ReplayWorkload w = SmallWorkload(cfg.vocab);
  Result<References> refs = ComputeReferences(w, **m);
  ASSERT_TRUE(refs.ok());
  std::vector<RequestRecord> recs = Correct(w, *refs);
  CheckResult c = CheckRecords(w, *refs, recs);
  EXPECT_EQ(c.checked, w.requests);
  EXPECT_EQ(c.mismatches, 0u);

  recs[1].result.set_generated(0, recs[1].result.generated(0) ^ 1);  // one wrong token
  recs[2].result.set_first_logits_digest(recs[2].result.first_logits_digest() + 1);
  recs[3].result.mutable_generated()->RemoveLast();  // too short
  recs[4].result.set_ok(false);                      // failed: not checked here
  recs[5].agent = 999;                               // not in the workload
  c = CheckRecords(w, *refs, recs);
  EXPECT_EQ(c.checked, w.requests - 1);
  EXPECT_EQ(c.mismatches, 4u);
  EXPECT_EQ(c.unknown, 1u);
  EXPECT_EQ(c.mismatched_ids, (std::vector<uint64_t>{recs[1].request_id, recs[2].request_id,
                                                     recs[3].request_id, recs[5].request_id}));
}

TEST(CheckerTest, RejectsTokensOutsideTheVocabulary) {
  const model::RefModelConfig cfg = SmallConfig();
  auto m = model::RefModel::Create(cfg);
  ASSERT_TRUE(m.ok());
  ReplayWorkload w = SmallWorkload(4096);  // ids up to 4095 > the model's 512
  Result<References> refs = ComputeReferences(w, **m);
  EXPECT_EQ(refs.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refs.status().message().find("vocab"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::replay
