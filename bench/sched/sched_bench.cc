// Scheduler microbenchmark: inter-engine decisions per second (one decision = one request given
// its DE, PE and read side) on the paper's large cluster (48P96D = 144 nodes x 8 GPUs = 1,152
// engines), single-threaded, against the same loop on 2P4D as the in-run baseline. Also
// PackBatch (§6.2) plans per second.
//
// Steady state: each iteration submits a batch of requests drawn from a seeded DualPath-like
// distribution (64K workload: ~33K context, ~430 append, ~176 gen), then one decode group and one
// prefill group fetch (cycling over groups) with reports that say their engines drained, so the
// queues stay bounded and every iteration does real placement work.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "dualpath/sched/batch.h"
#include "dualpath/sched/scheduler.h"

namespace dualpath::sched {
namespace {

constexpr int kBatch = 64;

std::vector<SchedRequest> Workload(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> context(std::log(30000.0), 0.5);
  std::exponential_distribution<double> append(1.0 / 430);
  std::exponential_distribution<double> gen(1.0 / 176);
  std::vector<SchedRequest> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t hit = std::min<int64_t>(65536, static_cast<int64_t>(context(rng)));
    out[i].id = RequestId(i);
    out[i].session = SessionId(i % 2048);
    out[i].hit_tokens = hit;
    out[i].prompt_tokens = hit + 1 + static_cast<int64_t>(append(rng));
    out[i].expected_gen_tokens = 1 + static_cast<int64_t>(gen(rng));
  }
  return out;
}

void RunDecisions(benchmark::State& state, int prefill_nodes, int decode_nodes,
                  SchedConfig config) {
  auto cluster = MakeUniformCluster(
      {.prefill_nodes = prefill_nodes, .decode_nodes = decode_nodes, .gpus_per_node = 8});
  auto sched = Scheduler::Create(cluster.value(), config).value();
  const ClusterDesc& c = sched->cluster();
  std::vector<uint32_t> pe_groups, de_groups;
  for (uint32_t g = 0; g < static_cast<uint32_t>(c.num_groups()); ++g) {
    (sched->group_role(GroupId(g)) == Role::kPrefill ? pe_groups : de_groups).push_back(g);
  }
  // Reports per group: engines drained (a few requests in flight, varied read queues) so every
  // fetch runs the full category / HBM logic.
  std::mt19937_64 rng(7);
  auto reports_for = [&](uint32_t g) {
    std::vector<EngineReport> r;
    for (const EngineDesc& e : c.engines) {
      if (e.group.value() != g) continue;
      EngineReport rep;
      rep.engine = e.id;
      rep.unfinished_requests = static_cast<int64_t>(rng() % 4);
      rep.unfinished_tokens = rep.unfinished_requests * 30000;
      rep.read_queue_tokens = static_cast<int64_t>(rng() % (2 * config.short_read_queue_tokens));
      rep.hbm_free_tokens = e.role == Role::kDecode ? 2'000'000 : 0;
      r.push_back(rep);
    }
    return r;
  };
  std::vector<std::vector<EngineReport>> reports;
  for (uint32_t g = 0; g < static_cast<uint32_t>(c.num_groups()); ++g) {
    reports.push_back(reports_for(g));
  }
  const std::vector<SchedRequest> work = Workload(1 << 16, 42);
  FetchResult out;
  out.decode.reserve(4096);
  out.prefill.reserve(4096);
  size_t next = 0, pe_i = 0, de_i = 0;
  int64_t decisions = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      SchedRequest r = work[next++ & (work.size() - 1)];
      if (!sched->Submit(r).ok()) state.SkipWithError("submit");
    }
    out.Clear();
    const uint32_t dg = de_groups[de_i++ % de_groups.size()];
    if (!sched->FetchForGroup(GroupId(dg), reports[dg], &out).ok()) state.SkipWithError("de");
    const uint32_t pg = pe_groups[pe_i++ % pe_groups.size()];
    if (!sched->FetchForGroup(GroupId(pg), reports[pg], &out).ok()) state.SkipWithError("pe");
    decisions += static_cast<int64_t>(out.prefill.size());
    benchmark::DoNotOptimize(out.prefill.data());
  }
  state.SetItemsProcessed(decisions);
  state.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(decisions), benchmark::Counter::kIsRate);
  state.counters["backlog"] = static_cast<double>(sched->pending());
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
