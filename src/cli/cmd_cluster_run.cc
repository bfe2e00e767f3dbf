// `dualpath cluster run`: Basic vs DualPath vs Oracle on the emulated cluster (docs/replay.md).
//
//   dualpath cluster run [--name N] [--pd 1P1D] [--stor-rate 400mbit] [--comp-rate 2gbit]
//       --system basic|dualpath|oracle|all --workload
//       synthetic|compute|codex|static|weka|mooncake|FILE
//       [--agents N] [--turns N] [--append N] [--gen N] [--max-context N] [--seed S]
//       [--shared-prefix N] [--routing dualpath|round-robin|sticky]
//       [--online --aps X] [--json OUT] [--plot DIR] [--keep]
//       [--store [--store-dram-mib M] [--store-ttl S]] [--local-tiers]
//
// Registers under the `cluster` group of cmd_cluster.cc (found, or added, by name).
#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/number_flags.h"
#include "dualpath/common/file.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/replay/cluster_run.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::cli {
namespace {

struct RunArgs {
  replay::ClusterRunOptions o;
  std::string systems = "all";
  std::string stor_rate = "400mbit";
  std::string comp_rate = "2gbit";
  std::string json_out;
  std::string plot_dir;
  bool no_check = false;
  bool no_pool = false;
  std::string fault;
  std::string rack_pool_size = "512M";
};

void Register(CLI::App& root, int* exit_code) {
  CLI::App* cluster =
      GetOrAddGroup(root, "cluster",
                    "Emulated multi-node cluster: namespaces, shaped links, GlusterFS (testbed)");
  auto a = std::make_shared<RunArgs>();
  replay::ClusterRunOptions& o = a->o;
  // The README's main job runs on these defaults: enough agents to keep both storage links of a
  // 1P1D cluster busy under DualPath, short enough that a fresh machine builds and runs it in
  // under five minutes (release build ~3.2 min on 2 cores, the run ~1.5 min).
  o.workload.agents = 16;
  o.workload.turns = 8;
  CLI::App* run = cluster->add_subcommand(
      "run",
      "Run Basic / DualPath / Oracle end to end on the testbed and compare (needs root; brings "
      "the cluster up and down unless it is already up)");
  run->add_option("--name", o.name, "Cluster name (default dp)");
  CLI::Option* pd = run->add_option("--pd", o.pd, "Prefill and decode nodes (default 1P1D)");
  run->add_option("--stor-rate", a->stor_rate, "Storage link rate (default 400mbit)");
  run->add_option("--comp-rate", a->comp_rate, "Compute link rate (default 2gbit)");
  run->add_option("--system", a->systems,
                  "basic, dualpath, oracle, all, or a comma-separated list (default all)");
  run->add_option("--workload", o.workload.source,
                  "synthetic (Table-2 shaped), compute (long appends), codex (shared system "
                  "prefix, long first prompt, ~2K appends, 30 turns), static (TraCT: first prompts "
                  "of 1500/3000/4500/6000 tokens by agent, 3 output tokens), weka, mooncake, or a "
                  "trace file/directory (default synthetic)");
  run->add_option("--agents", o.workload.agents, "Agents (default 16)");
  CLI::Option* turns = run->add_option("--turns", o.workload.turns,
                                       "At most this many turns per agent (default 8; codex: 30)");
  CLI::Option* append =
      run->add_option("--append", o.workload.append,
                      "Mean append tokens after the first turn (default 24; compute: 512; codex: "
                      "2048)");
  run->add_option("--shared-prefix", o.workload.shared_prefix,
                  "codex: system-prompt tokens every agent's prompts share (default max-context "
                  "/ 4)");
  run->add_option("--gen", o.workload.gen, "Mean generated tokens per turn (default 16)");
  run->add_option("--max-context", o.workload.max_context,
                  "Longest prompt + generation in tokens (default 3072)");
  run->add_option("--seed", o.workload.seed, "Workload and arrival seed (default 1)");
  run->add_flag("--online", o.replay.online, "Poisson agent arrivals instead of all at once");
  run->add_option("--aps", o.replay.aps, "Online: agent arrivals per second (default 1)");
  run->add_option("--timeout", o.replay.timeout_s, "Give up on a system after this many seconds");
  run->add_option("--model-spec", o.model_spec,
                  "Reference model, e.g. layers=8,q_heads=4,kv_heads=4,head_dim=32 (default)");
  run->add_option("--block-tokens", o.block_tokens, "Tokens per KV block (default 64)");
  run->add_option("--goodput", o.goodput,
                  "measure (read a file through every node at once) or nominal (0.993 x rate)");
  run->add_option("--sample-interval", o.sample_interval_s,
                  "Seconds between link-counter samples (default 0.25)");
  run->add_option("--heartbeat-s", o.heartbeat_s, "Scheduler service heartbeat (default 1)");
  run->add_option("--routing", o.routing,
                  "Prefill engine per turn: dualpath (the system's choice, default), round-robin "
                  "((agent + turn) mod P) or sticky (agent mod P); passed to the service");
  CLI::Option* store_flag =
      run->add_flag("--store", o.store,
                    "Distributed KV store per system: etcd, two masters, a store node per node; "
                    "engines read and write through it, the hit probe asks it (docs/store.md)");
  run->add_option("--store-dram-mib", o.store_dram_mib,
                  "DRAM tier of each store node, MiB (default 256; with --store)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->needs(store_flag);
  run->add_option("--store-ttl", o.store_ttl_s,
                  "Store nodes' membership and masters' leader lease, seconds (default 10; with "
                  "--store): how long a killed node stays listed, a killed leader leads")
      ->needs(store_flag);
  run->add_flag("--local-tiers", o.local_tiers,
                "Node-local persistent tiers: each node's engine keeps its blocks in its own "
                "directory on its own mount; no node reads another's");
  run->add_option("--engine-arg", o.engine_args, "Extra argument for every engine (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--service-arg", o.service_args,
                  "Extra argument for the scheduler service (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--fault", a->fault,
                  "KIND[:NODE]@TRIGGER[:SECONDS]: inject a fault into each system's replay, e.g. "
                  "stor-link:p0@4req:5, comp-link:d0@4req:5, brick@4req, service@4req, "
                  "store-node:p1@4req, store-leader@4req (these two with --store), "
                  "rack-manager@4req (with --kv-substrate rack-pool --rack-pool noncoherent), "
                  "engine:d1@4req (that engine SIGKILLed: its requests rescheduled, its buffers "
                  "swept; docs/faults.md)");
  run->add_option("--dualpath-bin", o.dualpath_bin,
                  "dualpath binary for the service and engines (default: this one)");
  run->add_option("--json", a->json_out, "Write results (sim's schema + records) here");
  run->add_option("--plot", a->plot_dir, "Write jct.png and storage_<system>.png here (gnuplot)");
  run->add_flag("--metrics", o.metrics,
                "Every service and engine serves Prometheus /metrics on a socket bound on "
                "--metrics-host; prints where to scrape (docs/metrics.md)");
  run->add_option("--metrics-host", o.metrics_host,
                  "Address the metrics sockets are bound on, where Prometheus reaches them "
                  "(default 127.0.0.1)");
  run->add_option("--metrics-wait-s", o.metrics_wait_s,
                  "Each process waits up to this long after its work for a last scrape "
                  "(default 5)");
  run->add_option("--metrics-config", o.metrics_config,
                  "Write a prometheus.yml that scrapes every process (implies --metrics)");
  run->add_option("--metrics-targets", o.metrics_targets,
                  "Write a Prometheus file_sd target file of every process (implies --metrics)");
  run->add_flag("--keep", o.keep, "Leave the cluster and store directories in place");
  run->add_flag("--no-pool", a->no_pool,
                "Engines keep their buffers in process memory instead of their node's "
                "shared-memory pool (/dev/shm/dualpath-CLUSTER-NODE.pool)");
  run->add_option("--kv-substrate", o.kv_substrate,
                  "How KV moves between a PE and its DE: ucx (puts over the compute link) or "
                  "rack-pool (objects in the cluster's rack pool, only notices on the compute "
                  "link; docs/e2e.md \"KV substrate\"); default ucx");
  run->add_option("--rack-pool", o.rack_pool_model,
                  "With --kv-substrate rack-pool on a cluster without a rack pool: the memory "
                  "model of the one this run makes, coherent or noncoherent (default coherent)");
  run->add_option("--rack-prefix-cache", o.rack_prefix_cache,
                  "With --kv-substrate rack-pool: on (default) also uses the rack pool as the "
                  "rack-wide prefix cache (hits read from it before storage, new blocks published "
                  "there; docs/pool.md \"Rack prefix cache\"), off: PE<->DE KV only");
  run->add_option("--rack-pool-size", a->rack_pool_size,
                  "Data size of the run's rack pool (K/M/G; default 512M)");
  run->add_flag("--no-check", a->no_check, "Skip the recompute-and-compare correctness check");
  run->callback([a, pd, append, turns, exit_code] {
    // SIGINT / SIGTERM end the run at its next check (within a poll interval): the service and
    // engines are stopped, the cluster and pools this run made are removed, exit 130 / 143.
    InstallStopHandlers();
    Status s = [&]() -> Status {
      replay::ClusterRunOptions o = a->o;
      o.pd_given = pd->count() > 0;
      o.check = !a->no_check;
      o.pool = !a->no_pool;
      o.metrics = o.metrics || !o.metrics_config.empty() || !o.metrics_targets.empty();
      o.workload = replay::WithSourceDefaults(
          o.workload, {.append = append->count() > 0, .turns = turns->count() > 0});
      ASSIGN_OR_RETURN(o.systems, replay::ParseSystems(a->systems));
      ASSIGN_OR_RETURN(o.rack_pool_bytes, ParseSize("--rack-pool-size", a->rack_pool_size));
      if (!a->fault.empty()) {
        ASSIGN_OR_RETURN(o.fault, replay::ParseFault(a->fault));
      }
      ASSIGN_OR_RETURN(o.stor_rate_bps, testbed::ParseRate(a->stor_rate));
      ASSIGN_OR_RETURN(o.comp_rate_bps, testbed::ParseRate(a->comp_rate));
      RETURN_IF_ERROR(testbed::ValidateClusterName(o.name));
      RETURN_IF_ERROR(testbed::ParsePdSpec(o.pd).status());
      ASSIGN_OR_RETURN(replay::ClusterRunReport report, replay::RunOnCluster(o, std::cerr));
      std::cout << replay::RunTable(report.runs) << std::flush;
      if (!a->json_out.empty()) {
        RETURN_IF_ERROR(WriteOutputFile(
            a->json_out, replay::RunJson(report.config_json, report.runs), "--json"));
      }
      if (!a->plot_dir.empty()) {
        RETURN_IF_ERROR(replay::WriteRunPlots(report.runs, a->plot_dir));
      }
      // Wrong outputs or failed requests make the run fail (exit 1) after everything is written.
      for (const replay::SystemRun& r : report.runs) {
        const replay::Summary sum = replay::Summarize(r.replay);
        if (r.mismatches.value_or(0) > 0 || sum.failed > 0) {
          return Internal(r.system + ": " + std::to_string(r.mismatches.value_or(0)) +
                          " mismatches, " + std::to_string(sum.failed) + " failed requests");
        }
        if (r.fault && !r.fault->recovery_s) {
          return Internal(r.system + ": no request completed after the fault " +
                          r.fault->spec.ToString() + " ended");
        }
        if (r.killed_buffers && !r.killed_buffers->reclaimed()) {
          return Internal(r.system + ": the killed engine's buffer root " + r.killed_buffers->root +
                          " was not reclaimed from " + r.killed_buffers->pool);
        }
      }
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster run", s);
  });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
