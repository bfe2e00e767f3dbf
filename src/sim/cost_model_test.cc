#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include "sim/sched_driver.h"

namespace dualpath::sim {
namespace {

kv::ModelGeometry Ds660b() {
  auto m = kv::FindModel("ds660b");
  EXPECT_TRUE(m.ok());
  return *m;
}

TEST(CostModelTest, AttentionTimeGrowsWithCachedAndNewTokens) {
  CostModel cost(SimConfig{}, Ds660b());
  EXPECT_GT(cost.PrefillAttentionTime(32768, 512), cost.PrefillAttentionTime(1024, 512));
  EXPECT_GT(cost.PrefillAttentionTime(32768, 1024), cost.PrefillAttentionTime(32768, 512));
  EXPECT_GT(cost.PrefillAttentionTime(0, 1), 0);
}

TEST(CostModelTest, GemmEfficiencyImprovesWithBatch) {
  SimConfig c;
  CostModel cost(c, Ds660b());
  const double per_token_small = cost.PrefillLinearTime(64) / 64;
  const double per_token_big = cost.PrefillLinearTime(8192) / 8192;
  EXPECT_GT(per_token_small, 2 * per_token_big);
  // At a large batch the per-token time approaches FLOPs / (peak x efficiency).
  const double ideal =
      Ds660b().LinearFlopsPerToken() / (c.hw.gpu_fp8_tflops * 1e12 * c.engine.linear_efficiency);
  EXPECT_NEAR(cost.PrefillLinearTime(1e7) / 1e7, ideal, ideal * 0.01);
  EXPECT_EQ(cost.PrefillLinearTime(0), 0);
}

TEST(CostModelTest, DecodeIsTheSlowerOfComputeAndMemory) {
  SimConfig c;
  CostModel cost(c, Ds660b());
  // decode_weight_gb is derived from the model when not set (ResolveEngine): routed experts over
  // EP32 plus the replicated weights a step reads (docs/sim.md).
  const double weight_gb = ResolveEngine(c, Ds660b(), 2, 4)->engine.decode_weight_gb;
  EXPECT_NEAR(weight_gb, 38.40, 0.01);
  const double weights_only =
      weight_gb * 1e9 / (c.hw.hbm_tbps * 1e12 * c.engine.decode_hbm_efficiency);
  EXPECT_NEAR(cost.DecodeGpuTime(0, 0, 1), weights_only, 1e-12);
  EXPECT_GT(cost.DecodeGpuTime(1e15, 0, 1), weights_only);  // compute-bound
  EXPECT_EQ(cost.DecodeGpuTime(1e15, 1e12, 0), 0);          // idle GPU
}

TEST(CostModelTest, LinksUseTheSlowerOfCnicShareAndPcie) {
  SimConfig c;
  c.hw.cnic_gbps = 400;
  c.hw.cnic_kv_share = 1.0;
  c.hw.pcie_gBps = 32;
  EXPECT_DOUBLE_EQ(CostModel(c, Ds660b()).kv_link_bytes_per_s(), 32e9);
  c.hw.pcie_gBps = 64;
  EXPECT_DOUBLE_EQ(CostModel(c, Ds660b()).kv_link_bytes_per_s(), 50e9);
}

TEST(CostModelTest, SchedulerAttentionFitTracksTheFlopModel) {
  CostModel cost(SimConfig{}, Ds660b());
  const sched::AttentionTimeModel m = FitAttentionModel(cost);
  ASSERT_TRUE(m.Validate().ok());
  for (int64_t c : {2048, 16384, 49152}) {
    for (int64_t n : {128, 512, 2048}) {
      const double truth = cost.PrefillAttentionTime(c, n) * 1e9;
      EXPECT_NEAR(m.ItemNs(c, n), truth, 0.35 * truth) << c << " " << n;
    }
  }
}

// `dualpath model calibrate` feeds the simulator an engine's measured costs (the reference CPU
// model's on the testbed); the cost model must then charge exactly those, not GPU-peak ones.
TEST(CostModelTest, MeasuredCostsAreChargedExactly) {
  const kv::ModelGeometry model = Ds660b();
  MeasuredCosts m;
  m.forward_overhead_s = 2e-3;
  m.linear_s_per_token = 1e-4;
  m.attention_s_per_flop = 1e-10;
  m.decode_step_overhead_s = 5e-4;
  m.decode_s_per_flop = 2e-10;
  Result<SimConfig> c = ApplyMeasuredCosts(SimConfig{}, model, m);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  CostModel cost(*c, model);
  EXPECT_NEAR(cost.PrefillLinearTime(300), 300 * 1e-4, 1e-9);
  EXPECT_NEAR(cost.PrefillAttentionTime(1024, 64), model.AttentionFlops(1024, 64) * 1e-10,
              1e-9 * model.AttentionFlops(1024, 64) * 1e-10);
  EXPECT_NEAR(cost.ForwardOverhead(), 2e-3, 1e-12);
  EXPECT_NEAR(cost.decode_overhead_s(), 5e-4, 1e-12);
  const double flops = cost.DecodeFlopsPerStep(2048) * 3;
  EXPECT_NEAR(cost.DecodeGpuTime(flops, cost.DecodeKvBytesPerStep(2048) * 3, 3), flops * 2e-10,
              flops * 2e-10 * 1e-6);
  // A cost of 0 per token, or a negative overhead, says the measurement failed: refused.
  MeasuredCosts bad = m;
  bad.linear_s_per_token = 0;
  EXPECT_EQ(ApplyMeasuredCosts(SimConfig{}, model, bad).status().code(),
            dualpath::Code::kSimBadConfig);
  bad = m;
  bad.forward_overhead_s = -1;
  EXPECT_EQ(ApplyMeasuredCosts(SimConfig{}, model, bad).status().code(),
            dualpath::Code::kSimBadConfig);
}

// The cost model keeps the model's attention constants (kv::AttentionCost) instead of asking the
// model on every call: the doubles must be the model's own, bit for bit, or the simulator's
// results would move (issue 27).
TEST(CostModelTest, KeptAttentionConstantsGiveTheModelsOwnDoubles) {
  for (const kv::ModelGeometry& model : kv::ModelPresets()) {
    const CostModel cost(SimConfig{}, model);
    const kv::AttentionCost kept = model.AttentionCostOf();
    for (const uint64_t ctx :
         {0ULL, 1ULL, 100ULL, 2047ULL, 2048ULL, 2049ULL, 65536ULL, 1ULL << 20}) {
      EXPECT_EQ(cost.DecodeFlopsPerStep(ctx), model.DecodeFlopsPerToken(ctx))
          << model.name << " context " << ctx;
      for (const uint64_t n : {0ULL, 1ULL, 512ULL, 4096ULL}) {
        EXPECT_EQ(kept.Flops(ctx, n), model.AttentionFlops(ctx, n))
            << model.name << " cached " << ctx << " new " << n;
      }
    }
  }
}

}  // namespace
}  // namespace dualpath::sim
