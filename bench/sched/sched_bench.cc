// Scheduler microbenchmark: inter-engine decisions per second (one decision = one request given
// its DE, PE and read side) on the paper's large cluster (48P96D = 144 nodes x 8 GPUs = 1,152
// engines), single-threaded, against the same loop on 2P4D as the in-run baseline. Also
// PackBatch (§6.2) plans per second.
//
// One iteration = one DecisionLoop::Step() (include/dualpath/benchlib/decision_loop.h): 64
// requests of a seeded 64K-like workload submitted, one decode-group and one prefill-group fetch
// with fresh reports.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "dualpath/benchlib/decision_loop.h"
#include "dualpath/sched/batch.h"
#include "dualpath/sched/scheduler.h"

namespace dualpath::sched {
namespace {

void RunDecisions(benchmark::State& state, int prefill_nodes, int decode_nodes,
                  SchedConfig config) {
  auto loop = DecisionLoop::Create(
      {.prefill_nodes = prefill_nodes, .decode_nodes = decode_nodes, .gpus_per_node = 8}, config,
      42);
  if (!loop.ok()) {
    state.SkipWithError(loop.status().ToString().c_str());
    return;
  }
  int64_t decisions = 0;
  for (auto _ : state) {
    auto n = (*loop)->Step();
    if (!n.ok()) {
      state.SkipWithError(n.status().ToString().c_str());
      break;
    }
    decisions += *n;
  }
  state.SetItemsProcessed(decisions);
  state.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(decisions), benchmark::Counter::kIsRate);
  state.counters["backlog"] = static_cast<double>((*loop)->pending());
}

void BM_Decisions_2P4D(benchmark::State& s) { RunDecisions(s, 2, 4, SchedConfig::DualPath()); }
void BM_Decisions_48P96D(benchmark::State& s) { RunDecisions(s, 48, 96, SchedConfig::DualPath()); }
void BM_Decisions_48P96D_Split(benchmark::State& s) {
  SchedConfig c = SchedConfig::DualPath();
  c.split_reads = true;
  RunDecisions(s, 48, 96, c);
}
void BM_Decisions_48P96D_RoundRobin(benchmark::State& s) {
  SchedConfig c = SchedConfig::DualPathRoundRobinSide();
  c.engine_policy = EnginePolicy::kRoundRobin;
  RunDecisions(s, 48, 96, c);
}
BENCHMARK(BM_Decisions_2P4D);
BENCHMARK(BM_Decisions_48P96D);
BENCHMARK(BM_Decisions_48P96D_Split);
BENCHMARK(BM_Decisions_48P96D_RoundRobin);

// PackBatch over a PE queue of `range(0)` requests (~33K cached, ~430 new tokens each).
void BM_PackBatch(benchmark::State& state) {
  std::mt19937_64 rng(3);
  std::vector<PrefillWork> q(static_cast<size_t>(state.range(0)));
  for (PrefillWork& w : q) {
    w.cached_tokens = 20000 + static_cast<int64_t>(rng() % 30000);
    w.remaining_tokens = 100 + static_cast<int64_t>(rng() % 800);
  }
  AttentionTimeModel m;
  m.fixed_ns = 1e5;
  m.per_token_ns = 200;
  m.per_cached_pair_ns = 0.05;
  m.per_token_sq_ns = 0.02;
  BatchLimits l;
  BatchPlan plan;
  plan.entries.reserve(q.size());
  int64_t plans = 0;
  for (auto _ : state) {
    if (!PackBatch(q, m, l, &plan).ok()) state.SkipWithError("pack");
    benchmark::DoNotOptimize(plan.entries.data());
    ++plans;
  }
  state.SetItemsProcessed(plans);
  state.counters["entries"] = static_cast<double>(plan.entries.size());
}
BENCHMARK(BM_PackBatch)->Arg(64)->Arg(512);

}  // namespace
}  // namespace dualpath::sched

BENCHMARK_MAIN();
