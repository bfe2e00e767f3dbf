// `dualpath control serve|engines|shutdown`: the scheduler service (docs/control.md) and two small
// clients for operators and scripts.
#include <pthread.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "cli/command.h"
#include "cli/metrics_flags.h"
#include "cli/tls_flags.h"
#include "dualpath/common/log.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/control/client.h"
#include "dualpath/control/options.h"
#include "dualpath/control/server.h"

namespace dualpath::cli {
namespace {

struct ServeArgs {
  std::string listen;
  std::string system = "dualpath";
  std::string model_spec;
  uint32_t block_tokens = 64;
  std::string store_root;
  std::string store_subdir;
  std::string kv_store_etcd;
  std::string kv_store_cluster;
  GrpcTlsFiles kv_store_tls;  // --kv-store-tls-*; none given: --tls-*
  std::string engines;
  int expect_prefill = 0;
  int expect_decode = 0;
  double heartbeat_s = 1.0;
  uint32_t max_attempts = 3;
  int64_t short_read_queue_tokens = 0;
  int64_t unfinished_token_limit = 0;
  bool split_reads = false;
  std::string routing = "dualpath";
  std::string hash_seed = "0";
  std::string store_namespace;
  bool placement = false;
  MetricsFlags metrics;
  GrpcTlsFiles tls;
};

// What `control engines|shutdown` take: the service's address and the client's TLS options.
struct ClientArgs {
  std::string scheduler;
  GrpcTlsFiles tls;
};

// A client of the service, or the exit code for bad TLS options.
Result<control::Client> ConnectClient(const ClientArgs& a) {
  ASSIGN_OR_RETURN(GrpcTls tls, LoadGrpcTls(a.tls));
  return control::Client(a.scheduler, control::ClientOptions{.tls = std::move(tls)});
}

int Serve(const ServeArgs& a) {
  control::ServiceOptions o;
  auto system = sched::ParseSystem(a.system, sched::kServiceSystems);
  if (!system.ok()) return ReportError("control serve: --system", system.status());
  o.system = *system;
  o.model_spec = a.model_spec;
  o.block_tokens = a.block_tokens;
  o.store_root = a.store_root;
  o.store_subdir = a.store_subdir;
  o.kv_store_etcd = a.kv_store_etcd;
  o.kv_store_cluster = a.kv_store_cluster;
  if (!a.engines.empty()) {
    auto engines = control::ParseEngineList(a.engines);
    if (!engines.ok()) return ReportError("control serve: --engines", engines.status());
    o.engines = std::move(engines).value();
  }
  o.expect_prefill = a.expect_prefill;
  o.expect_decode = a.expect_decode;
  o.heartbeat_s = a.heartbeat_s;
  o.max_attempts = a.max_attempts;
  o.short_read_queue_tokens = a.short_read_queue_tokens;
  o.unfinished_token_limit = a.unfinished_token_limit;
  o.split_reads = a.split_reads;
  auto routing = sched::ParseRouting(a.routing);
  if (!routing.ok()) return ReportError("control serve", routing.status());
  o.routing = *routing;
  o.hash_seed = a.hash_seed;
  o.store_namespace = a.store_namespace;
  o.placement = a.placement;
  // Bad input is refused before anything listens (docs/control.md "Input ranges").
  if (Status st = o.Validate(); !st.ok()) return ReportError("control serve", st);
  // Declared before the server: the service's metrics unregister before the registry goes.
  metrics::Registry registry;
  auto metrics_server = StartMetrics(a.metrics, registry);
  if (!metrics_server.ok()) return ReportError("control serve", metrics_server.status());
  if (*metrics_server != nullptr) o.metrics = &registry;
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) return ReportError("control serve", tls.status());
  Result<GrpcTls> kv_store_tls = LoadGrpcTlsOr(a.kv_store_tls, a.tls);
  if (!kv_store_tls.ok()) return ReportError("control serve", kv_store_tls.status());
  o.kv_store_tls = std::move(*kv_store_tls);

  // SIGTERM/SIGINT are taken by one thread (sigwait) rather than a handler: blocked here, before
  // gRPC starts its threads, so every thread inherits the mask.
  const StopSignalWaiter signals;

  auto server = control::ControlServer::Start(a.listen, o, *tls);
  if (!server.ok()) return ReportError("control serve", server.status());
  control::ControlServer& s = **server;
  std::cout << "listening on " << s.address() << std::endl;

  std::thread watcher([&] {
    if (const int sig = signals.Wait(); sig != 0) {
      log::Info("control: signal {}: stopping", sig);
      RequestStop(sig);
      s.RequestStop();
    }
  });
  const bool finished = s.Wait();
  // The run is over: the final counts go to one more scrape before we exit (not after a stop
  // signal: then the process exits promptly).
  AwaitFinalScrape(metrics_server->get(), a.metrics);
  StopSignalWaiter::Wake(watcher);
  watcher.join();
  const control::ServiceStats st = s.service().stats();
  log::Info(
      "control: {} submitted={} assigned={} completed={} failed={} resubmitted={} "
      "engines_dead={} engines_cut_off={} engines_reconnected={} stale_results={} routing={} "
      "routed={} route_fallbacks={}",
      finished ? "run finished" : "stopped", st.submitted, st.assigned, st.completed, st.failed,
      st.resubmitted, st.engines_dead, st.engines_cut_off, st.engines_reconnected, st.stale_results,
      sched::RoutingName(o.routing), st.routed, st.route_fallbacks);
  server->reset();
  if (const int sig = StopSignal(); sig != 0) {
    // Stopped, not finished: say so and exit 128 + signal (the server is down by now).
    std::cerr << "dualpath control serve: stopped by " << StopSignalName(sig) << "\n";
    return StopExitCode(sig);
  }
  return kExitOk;
}

int Engines(const ClientArgs& args) {
  Result<control::Client> client = ConnectClient(args);
  if (!client.ok()) return ReportError("control engines", client.status());
  Result<control::v1::ListEnginesReply> listed = client->ListEngines();
  if (!listed.ok()) return ReportError("control engines", listed.status());
  const control::v1::ListEnginesReply& reply = *listed;
  // reachable: over the compute network, as the service judges it from the engines' probes.
  std::printf("%-4s %-12s %-8s %-8s %-6s %-9s %s\n", "id", "name", "role", "node", "alive",
              "reachable", "peer");
  for (int i = 0; i < reply.engines_size(); ++i) {
    const auto& e = reply.engines(i);
    const bool reachable = i >= reply.reachable_size() || reply.reachable(i);
    std::printf("%-4u %-12s %-8s %-8s %-6s %-9s %s\n", reply.engine_ids(i), e.name().c_str(),
                e.role() == control::v1::ROLE_DECODE ? "decode" : "prefill", e.node().c_str(),
                reply.alive(i) ? "yes" : "no", reachable ? "yes" : "no", e.peer_addr().c_str());
  }
  return kExitOk;
}

int ShutdownRun(const ClientArgs& args) {
  Result<control::Client> client = ConnectClient(args);
  if (!client.ok()) return ReportError("control shutdown", client.status());
  Status st = client->Shutdown();
  if (!st.ok()) return ReportError("control shutdown", st);
  return kExitOk;
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* control = root.add_subcommand("control", "The scheduler service (DualPath §6.1)");
  control->require_subcommand(1);

  auto a = std::make_shared<ServeArgs>();
  CLI::App* serve = control->add_subcommand(
      "serve", "Run the scheduler service; prints 'listening on ADDR' when ready");
  serve->add_option("--listen", a->listen, "unix:PATH or HOST:PORT (port 0: any free port)")
      ->required();
  serve->add_option("--system", a->system, "basic|dualpath|oracle (default dualpath)");
  serve->add_option("--model-spec", a->model_spec,
                    "reference model spec, e.g. layers=8,q_heads=4,kv_heads=4,head_dim=32");
  serve->add_option("--block-tokens", a->block_tokens, "tokens per KV block (default 64)");
  serve->add_option("--store-root", a->store_root,
                    "block store root probed for hits (metadata only; empty: no hits)");
  serve->add_option("--store-subdir", a->store_subdir,
                    "per-run directory under --store-root; several comma-separated (node-local "
                    "tiers): a block is stored when any of them holds it");
  serve->add_option("--kv-store-etcd", a->kv_store_etcd,
                    "distributed KV store the hit probe also asks: etcd HOST:PORT[,...] "
                    "(docs/store.md \"In the system\")");
  serve->add_option("--kv-store-cluster", a->kv_store_cluster, "the store cluster's name");
  AddPeerTlsFlags(serve, &a->kv_store_tls, "kv-store", "the KV store's etcd and masters");
  serve->add_option("--engines", a->engines,
                    "expected engines NAME:ROLE:NODE,... (e.g. p0.0:prefill:p0,d0.0:decode:d0)");
  serve->add_option("--expect-prefill", a->expect_prefill,
                    "expected prefill engines (when --engines is not given)");
  serve->add_option("--expect-decode", a->expect_decode,
                    "expected decode engines (when --engines is not given)");
  serve->add_option("--heartbeat-s", a->heartbeat_s,
                    "engines silent for 3 x this are declared dead (default 1)");
  serve->add_option("--max-attempts", a->max_attempts,
                    "tries per request before it is reported failed (default 3)");
  serve->add_option("--short-read-queue-tokens", a->short_read_queue_tokens,
                    "sched alpha in tokens (0: sched default)");
  serve->add_option("--unfinished-token-limit", a->unfinished_token_limit,
                    "sched beta in tokens (0: sched default)");
  serve->add_flag("--split-reads", a->split_reads, "dualpath: split reads when both queues long");
  serve->add_option("--routing", a->routing,
                    "prefill engine per turn: dualpath (the system's choice, default), "
                    "round-robin ((agent + turn) mod P) or sticky (agent mod P)");
  serve->add_option("--hash-seed", a->hash_seed,
                    "prompt block hash seed (default \"0\"; vLLM: its PYTHONHASHSEED, or "
                    "\"vllm-none-hash\" when that is unset)");
  serve->add_option("--store-namespace", a->store_namespace,
                    "probe hits in this dualpath.KVStore namespace's directory under --store-root "
                    "(the vLLM connector's persistent tier) instead of the engines' layout");
  serve->add_flag("--placement", a->placement,
                  "place requests for instances that do not fetch (vLLM behind `python -m "
                  "dualpath.proxy`): Place/ReportEngines; the instances register through the "
                  "proxy, --expect-prefill/--expect-decode are upper bounds");
  AddMetricsOptions(serve, &a->metrics);
  AddTlsFlags(serve, &a->tls, /*serves=*/true);
  serve->callback([a, exit_code] { *exit_code = Serve(*a); });

  auto c = std::make_shared<ClientArgs>();
  CLI::App* engines = control->add_subcommand("engines", "List the engines a service knows");
  engines->add_option("--scheduler", c->scheduler, "service address")->required();
  AddTlsFlags(engines, &c->tls, /*serves=*/false);
  engines->callback([c, exit_code] { *exit_code = Engines(*c); });

  CLI::App* shutdown =
      control->add_subcommand("shutdown", "End the run: engines get shutdown on their next fetch");
  shutdown->add_option("--scheduler", c->scheduler, "service address")->required();
  AddTlsFlags(shutdown, &c->tls, /*serves=*/false);
  shutdown->callback([c, exit_code] { *exit_code = ShutdownRun(*c); });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
