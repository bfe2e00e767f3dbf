// `dualpath bench sched`: scheduler decisions per second on a uniform cluster (default 48P96D,
// the paper's 1,152 GPUs), with 2P4D measured in the same run as the baseline. Single-threaded.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "dualpath/benchlib/decision_loop.h"
#include "dualpath/sched/cluster.h"
#include "dualpath/sched/config.h"
#include "dualpath/sched/system.h"

namespace dualpath::cli {
namespace {

struct Rate {
  double per_cpu_s = 0;
  double per_wall_s = 0;
  int64_t decisions = 0;
};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Result<Rate> Measure(const sched::UniformClusterSpec& spec, const sched::SchedConfig& config,
                     double seconds) {
  ASSIGN_OR_RETURN(auto loop, sched::DecisionLoop::Create(spec, config, 42));
  for (int i = 0; i < 200; ++i) RETURN_IF_ERROR((loop->Step()).status());  // warm-up
  Rate r;
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  double wall = 0;
  while (wall < seconds) {
    for (int i = 0; i < 100; ++i) {
      ASSIGN_OR_RETURN(int64_t n, loop->Step());
      r.decisions += n;
    }
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  }
  const double cpu = ThreadCpuSeconds() - cpu0;
  r.per_wall_s = static_cast<double>(r.decisions) / wall;
  r.per_cpu_s = cpu > 0 ? static_cast<double>(r.decisions) / cpu : 0;
  return r;
}

// The systems whose scheduling decisions differ (layerwise decides as basic does; oracle is
// dualpath with no hits to place).
constexpr sched::SystemKind kPolicies[] = {
    sched::SystemKind::kBasic, sched::SystemKind::kDualPathRr, sched::SystemKind::kDualPath,
    sched::SystemKind::kDualPathSplit};

// The system's preset (sched::PresetFor), with split reads on top when `split`.
Status ConfigFor(const std::string& policy, bool split, sched::SchedConfig* out) {
  Result<sched::SystemKind> kind = sched::ParseSystem(policy, kPolicies);
  if (!kind.ok()) return kind.status().WithContext("--policy");
  *out = sched::PresetFor(*kind);
  out->split_reads = out->split_reads || split;
  return out->Validate();
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* bench = GetOrAddGroup(root, "bench", "Microbenchmarks");
  CLI::App* sub = bench->add_subcommand(
      "sched", "Scheduler decisions per second (one decision = DE + PE + read side)");
  auto pd = std::make_shared<std::string>("48P96D");
  auto policy = std::make_shared<std::string>("dualpath");
  auto seconds = std::make_shared<double>(1.0);
  auto gpus = std::make_shared<int>(8);
  auto split = std::make_shared<bool>(false);
  sub->add_option("--pd", *pd, "cluster, <P>P<D>D nodes (default 48P96D = 1,152 GPUs)");
  sub->add_option("--gpus-per-node", *gpus, "engines per node (default 8)");
  sub->add_option("--policy", *policy,
                  "system whose scheduler runs: basic|dualpath-rr|dualpath|dualpath-split "
                  "(default dualpath)");
  sub->add_flag("--split", *split, "enable split reads (beyond the paper)");
  sub->add_option("--seconds", *seconds, "measurement time per cluster (default 1)");
  sub->callback([=] {
    auto spec = sched::ParsePd(*pd);
    if (!spec.ok()) {
      *exit_code = ReportError("bench sched", spec.status());
      return;
    }
    spec->gpus_per_node = *gpus;
    if (!(*seconds > 0 && *seconds <= 600)) {
      *exit_code = ReportError("bench sched", InvalidArgument("--seconds must be in (0, 600]"));
      return;
    }
    sched::SchedConfig config;
    if (Status s = ConfigFor(*policy, *split, &config); !s.ok()) {
      *exit_code = ReportError("bench sched", s);
      return;
    }
    sched::UniformClusterSpec base{.prefill_nodes = 2, .decode_nodes = 4, .gpus_per_node = *gpus};
    auto b = Measure(base, config, *seconds);
    if (!b.ok()) {
      *exit_code = ReportError("bench sched", b.status());
      return;
    }
    auto t = Measure(*spec, config, *seconds);
    if (!t.ok()) {
      *exit_code = ReportError("bench sched", t.status());
      return;
    }
    const int gpus_total = (spec->prefill_nodes + spec->decode_nodes) * *gpus;
    std::printf("%-24s %16s %16s\n", "cluster", "decisions/cpu-s", "decisions/wall-s");
    std::printf("%-24s %16.0f %16.0f\n", "2P4D (baseline)", b->per_cpu_s, b->per_wall_s);
    const std::string name = *pd + " (" + std::to_string(gpus_total) + " GPUs)";
    std::printf("%-24s %16.0f %16.0f\n", name.c_str(), t->per_cpu_s, t->per_wall_s);
    std::printf("ratio %s / 2P4D: %.2f (cpu)   policy %s%s\n", pd->c_str(),
                t->per_cpu_s / b->per_cpu_s, policy->c_str(), *split ? " + split" : "");
    *exit_code = kExitOk;
  });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
