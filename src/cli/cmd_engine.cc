// `dualpath engine`: one prefill or decode engine process of the end-to-end system
// (docs/engine.md, docs/e2e.md). It registers with the scheduler service, serves EnginePeer and
// its transfer engine on the compute address, and runs until the scheduler says shutdown or it
// gets SIGTERM / SIGINT.
//
//   dualpath engine --role prefill --name p0.0 --node p0 --scheduler unix:/run/dp/sched.sock
//       --listen 10.99.2.11 --store-root /mnt/dp/p0 --store-subdir dualpath
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/command.h"
#include "cli/metrics_flags.h"
#include "cli/tls_flags.h"
#include "dualpath/common/log.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/engine/engine.h"
#include "dualpath/transfer/token.h"

namespace dualpath::cli {
namespace {

// Input ranges (docs/engine.md "Input ranges").
constexpr uint64_t kMaxBufferMib = 1u << 20;  // 1 TiB of registered host memory
constexpr uint64_t kMaxPoolMib = 1u << 22;    // 4 TiB: a node's shared-memory pool
constexpr uint64_t kMaxHbmTokens = 1ull << 40;
constexpr double kMaxTimeoutS = 86'400;  // a day: beyond, a stuck request is never noticed
constexpr uint64_t kMaxRanks = 64;       // threads standing in for the GPUs of one engine
constexpr uint64_t kMaxRackNode = 1023;  // a pool region has at most 1024 nodes (docs/pool.md)
constexpr double kMaxComputeQuotaMs = 60'000;
constexpr uint64_t kMaxMinChunkTokens = 1u << 20;  // no prompt is longer (kv limits)
constexpr uint64_t kMaxDecodeBatch = 1u << 16;     // far above what a DE buffer holds

struct EngineArgs {
  std::string role;
  std::string scheduler;
  std::string decode_batching = "continuous";
  std::string prefill_batching = "batched";
  std::string rank_placement = "packed";
  std::string attention_model = "calibrated";
  uint64_t min_chunk_tokens = 8;
  std::string kv_substrate = "ucx";
  std::string rack_prefix_cache = "on";
  std::string result_after_write = "off";
  uint64_t rack_node = 0;
  uint64_t ranks = 1;
  uint64_t max_decode_batch = 0;
  double compute_quota_ms = 300;
  uint64_t buffer_mib = 256;
  uint64_t pool_mib = 0;
  double request_timeout_s = 60;
  double peer_timeout_s = 5;
  std::string ucx_net_devices;
  MetricsFlags metrics;
  GrpcTlsFiles tls;
  GrpcTlsFiles kv_store_tls;  // --kv-store-tls-*; none given: --tls-*
  std::string transfer_token_file;
  engine::EngineOptions o;
};

// The interface that holds `ip` (IPv4), or "" if none / loopback. UCX's tcp transport otherwise
// uses every interface as an extra rail, and on the testbed that includes the storage link.
std::string InterfaceOf(const std::string& ip) {
  in_addr want{};
  if (inet_pton(AF_INET, ip.c_str(), &want) != 1) {
    return "";
  }
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) {
    return "";
  }
  std::string name;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) {
      continue;
    }
    auto* sin = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    if (sin->sin_addr.s_addr == want.s_addr && (i->ifa_flags & IFF_LOOPBACK) == 0) {
      name = i->ifa_name;
      break;
    }
  }
  freeifaddrs(ifs);
  return name;
}

int RunEngine(EngineArgs& a) {
  engine::EngineOptions& o = a.o;
  o.role = a.role == "prefill" ? engine::Role::kPrefill : engine::Role::kDecode;
  o.decode_batching = a.decode_batching == "serial" ? engine::DecodeBatching::kSerial
                                                    : engine::DecodeBatching::kContinuous;
  o.prefill_batching = a.prefill_batching == "serial" ? engine::PrefillBatching::kSerial
                                                      : engine::PrefillBatching::kBatched;
  o.rank_placement = a.rank_placement == "packed" ? sched::RankPlacement::kPacked
                                                  : sched::RankPlacement::kRoundRobin;
  o.calibrate_attention = a.attention_model == "calibrated";
  // docs/engine.md "Input ranges": checked before anything is created or connected.
  Status in_range = [&]() -> Status {
    RETURN_IF_ERROR(CheckCountRange("--buffer-mib", a.buffer_mib, 1, kMaxBufferMib, "MiB"));
    if (a.pool_mib != 0) {
      RETURN_IF_ERROR(
          CheckCountRange("--pool-mib", a.pool_mib, a.buffer_mib, kMaxPoolMib, "MiB (or 0)"));
    }
    RETURN_IF_ERROR(CheckCountRange("--hbm-tokens", static_cast<uint64_t>(o.hbm_tokens), 0,
                                    kMaxHbmTokens, "tokens"));
    RETURN_IF_ERROR(
        CheckRange("--request-timeout-s", a.request_timeout_s, 0.001, kMaxTimeoutS, "s"));
    RETURN_IF_ERROR(CheckCountRange("--ranks", a.ranks, 1, kMaxRanks, "ranks"));
    RETURN_IF_ERROR(
        CheckRange("--compute-quota-ms", a.compute_quota_ms, 0.001, kMaxComputeQuotaMs, "ms"));
    RETURN_IF_ERROR(
        CheckCountRange("--min-chunk-tokens", a.min_chunk_tokens, 1, kMaxMinChunkTokens, "tokens"));
    RETURN_IF_ERROR(CheckCountRange("--rack-node", a.rack_node, 0, kMaxRackNode, "(node id)"));
    if (a.kv_substrate == "rack-pool" && o.rack_pool_path.empty()) {
      return InvalidArgument("--kv-substrate rack-pool needs --rack-pool PATH");
    }
    if (!o.kv_store_etcd.empty() && o.kv_store_cluster.empty()) {
      return InvalidArgument("--kv-store-etcd needs --kv-store-cluster");
    }
    return CheckRange("--peer-timeout-s", a.peer_timeout_s, 0.001, kMaxTimeoutS, "s");
  }();
  if (!in_range.ok()) return ReportError("engine", in_range);
  // Declared before the engine: its metrics unregister (engine destroyed) before the registry goes.
  metrics::Registry registry;
  auto metrics_server = StartMetrics(a.metrics, registry);
  if (!metrics_server.ok()) return ReportError("engine", metrics_server.status());
  if (*metrics_server != nullptr) o.metrics = &registry;
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) return ReportError("engine", tls.status());
  o.tls = std::move(*tls);
  Result<GrpcTls> kv_store_tls = LoadGrpcTlsOr(a.kv_store_tls, a.tls);
  if (!kv_store_tls.ok()) return ReportError("engine", kv_store_tls.status());
  o.kv_store_tls = std::move(*kv_store_tls);
  if (!a.transfer_token_file.empty()) {
    Result<std::string> token = transfer::ReadTransferToken(a.transfer_token_file);
    if (!token.ok()) return ReportError("engine", token.status());
    o.transfer_token = std::move(*token);
  }
  o.buffer_bytes = a.buffer_mib << 20;
  o.kv_substrate = *engine::ParseKvSubstrate(a.kv_substrate);  // CLI::IsMember checked it
  o.rack_node = static_cast<uint32_t>(a.rack_node);
  o.rack_prefix_cache = a.rack_prefix_cache == "on";    // CLI::IsMember checked it
  o.result_after_write = a.result_after_write == "on";  // CLI::IsMember checked it
  o.pool_bytes = a.pool_mib << 20;
  o.request_timeout = FromSeconds(a.request_timeout_s);
  o.ranks = static_cast<uint32_t>(a.ranks);
  o.max_decode_batch = static_cast<uint32_t>(a.max_decode_batch);
  o.compute_quota = FromSeconds(a.compute_quota_ms / 1000);
  o.min_chunk_tokens = static_cast<int64_t>(a.min_chunk_tokens);
  o.peer_timeout = FromSeconds(a.peer_timeout_s);
  std::string dev = a.ucx_net_devices.empty() ? InterfaceOf(o.listen_ip) : a.ucx_net_devices;
  if (!dev.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) {
    setenv("UCX_NET_DEVICES", dev.c_str(), 1);
  }

  // SIGTERM / SIGINT stop the engine cleanly: blocked in every thread, taken by one.
  const StopSignalWaiter stop;

  Result<std::unique_ptr<engine::Engine>> e =
      engine::Engine::Create(o, engine::ConnectScheduler(a.scheduler, o.tls));
  if (!e.ok()) {
    return ReportError("engine", e.status());
  }
  engine::Engine* eng = e->get();
  std::thread waiter([&stop, eng] {
    if (const int sig = stop.Wait(); sig != 0) {
      log::Info("engine: signal {}: stopping", sig);
      RequestStop(sig);
      eng->Stop();
    }
  });
  std::cout << "engine " << o.name << " ready: peer " << eng->info().peer_addr() << " transfer "
            << eng->info().transfer_addr() << std::endl;
  Status s = eng->Run();
  // Its work is over: the final counts go to one more scrape (bounded) before the engine goes
  // (not after a stop signal: then the process exits promptly).
  AwaitFinalScrape(metrics_server->get(), a.metrics);
  StopSignalWaiter::Wake(waiter);
  waiter.join();
  e->reset();
  if (const int sig = StopSignal(); sig != 0) {
    // Stopped by a signal, not by the scheduler: say so and exit 128 + signal.
    std::cerr << "dualpath engine: stopped by " << StopSignalName(sig) << "\n";
    return StopExitCode(sig);
  }
  if (!s.ok()) {
    return ReportError("engine", s);
  }
  return kExitOk;
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* sub = root.add_subcommand(
      "engine", "Run one prefill or decode engine (registers with the scheduler service)");
  auto a = std::make_shared<EngineArgs>();
  sub->add_option("--role", a->role, "prefill|decode")
      ->required()
      ->check(CLI::IsMember({"prefill", "decode"}));
  sub->add_option("--name", a->o.name, "Unique engine name, e.g. p0.0")->required();
  sub->add_option("--node", a->o.node, "Node name, e.g. p0")->required();
  sub->add_option("--scheduler", a->scheduler, "Scheduler service: unix:PATH or HOST:PORT")
      ->required();
  sub->add_option("--listen", a->o.listen_ip, "Compute address (IP) for EnginePeer and transfers")
      ->required();
  sub->add_option("--peer-port", a->o.peer_port, "EnginePeer gRPC port (default 0: any)");
  sub->add_option("--transfer-port", a->o.transfer_port, "Transfer engine port (default 0: any)");
  sub->add_option("--store-root", a->o.store_root, "The node's KV store directory (its mount)")
      ->required();
  sub->add_option("--store-subdir", a->o.store_subdir, "Subdirectory of the store root");
  sub->add_option("--hbm-tokens", a->o.hbm_tokens,
                  "KV tokens the engine may hold at once (default: what fits in --buffer-mib)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--buffer-mib", a->buffer_mib,
                  "Registered host memory for buffers and KV, MiB (default 256)");
  sub->add_option("--pool", a->o.pool_path,
                  "The node's shared-memory pool (created if absent): the buffer becomes its "
                  "owner-bound root engine/NAME, reclaimed if the engine dies (default: process "
                  "memory)");
  sub->add_option("--pool-mib", a->pool_mib,
                  "Data size of the pool if this engine creates it, MiB (default 4 x "
                  "--buffer-mib)");
  sub->add_option("--ucx-tls", a->o.ucx_tls, "UCX_TLS of the transfer engine (default tcp)");
  sub->add_option("--ucx-net-devices", a->ucx_net_devices,
                  "UCX_NET_DEVICES (default: the interface holding --listen)");
  sub->add_option("--read-depth", a->o.read_depth, "Storage reads in flight (default 8)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--decode-batching", a->decode_batching,
                  "Decode engine: continuous (every active request advances one token per step, "
                  "arrivals join at step boundaries) or serial (one request at a time); default "
                  "continuous")
      ->check(CLI::IsMember({"continuous", "serial"}));
  sub->add_option("--max-decode-batch", a->max_decode_batch,
                  "Decode engine, continuous: the most requests in one decode step; ready "
                  "requests beyond it wait for one to finish, in arrival order (vLLM's "
                  "max_num_seqs). 0: bounded by the buffer memory only; default 0")
      ->check(CLI::Range(uint64_t{0}, kMaxDecodeBatch));
  sub->add_option("--prefill-batching", a->prefill_batching,
                  "Prefill engine: batched (forward batches of every loaded request's chunks, "
                  "§6.2 packing onto --ranks) or serial (one request per forward pass); default "
                  "batched")
      ->check(CLI::IsMember({"batched", "serial"}));
  sub->add_option("--ranks", a->ranks,
                  "Data-parallel attention ranks (threads standing in for the engine's GPUs), "
                  "1-64; default 1. Prefill engine, batched: chunks are packed onto them (§6.2). "
                  "Decode engine, continuous: each request decodes on the rank with the fewest "
                  "context tokens when it joins (serial decoding steps one request on one rank)");
  sub->add_option("--rank-placement", a->rank_placement,
                  "Prefill engine, batched: packed (§6.2: every rank's attention within the "
                  "compute quota and balanced) or round-robin (chunks dealt out in turn); default "
                  "packed")
      ->check(CLI::IsMember({"packed", "round-robin"}));
  sub->add_option("--compute-quota-ms", a->compute_quota_ms,
                  "Prefill engine, batched: each rank's compute quota, the predicted attention "
                  "time of one layer, ms; default 300");
  sub->add_option("--attention-model", a->attention_model,
                  "Prefill engine, batched: the time model the ranks are packed with: calibrated "
                  "(fitted to the ranks' measured attention times as batches run) or fixed (the "
                  "reference model's); default calibrated")
      ->check(CLI::IsMember({"calibrated", "fixed"}));
  sub->add_option("--min-chunk-tokens", a->min_chunk_tokens,
                  "Prefill engine, batched: the smallest chunk a request is cut to, 1-1048576; "
                  "default 8");
  sub->add_option("--batch-stats", a->o.batch_stats_path,
                  "Prefill engine: write forward batch sizes and per-rank attention balance "
                  "(JSON) here at exit");
  sub->add_option("--kv-substrate", a->kv_substrate,
                  "How KV moves between a PE and its DE: ucx (puts over the compute link) or "
                  "rack-pool (objects in the rack pool --rack-pool, only notices on the compute "
                  "link; docs/engine.md \"KV substrate\"); default ucx")
      ->check(CLI::IsMember({"ucx", "rack-pool"}));
  sub->add_option("--rack-pool", a->o.rack_pool_path,
                  "The rack's shared pool region (a file every node maps, or a DAX device); it "
                  "must exist (`cluster run --kv-substrate rack-pool` or `pool create` makes it)");
  sub->add_option("--rack-node", a->rack_node,
                  "This engine's node id in the rack pool (its non-coherent lock tier), 0-1023; "
                  "default 0");
  sub->add_option("--rack-prefix-cache", a->rack_prefix_cache,
                  "With --kv-substrate rack-pool: on (default) also uses the rack pool as the "
                  "rack-wide prefix cache (hit blocks looked up there before storage, new blocks "
                  "published there); off: the region carries PE<->DE KV only")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--result-after-write", a->result_after_write,
                  "Decode engines: off (default) reports a finished request at once while its new "
                  "blocks are written behind; on reports it only once they are written and "
                  "published, so the agent's next turn hits them all (docs/engine.md)")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--result-wait-blocks", a->o.result_wait_blocks,
                  "Decode engines, with --result-after-write off: a result still waits until its "
                  "new blocks are written when it queued at least this many (a cold turn's whole "
                  "prompt, which an agent's next turn that comes at once would recompute); 0 "
                  "(default): never")
      ->check(CLI::Range(0u, 1u << 20));
  sub->add_option("--kv-stats", a->o.kv_stats_path,
                  "Write the KV substrate's counters (JSON: compute link KV bytes, rack pool "
                  "bytes) here at exit");
  sub->add_option("--fetch-wait-ms", a->o.fetch_wait_ms, "Long-poll bound of a Fetch (default 200)")
      ->check(CLI::Range(1, 60000));
  sub->add_option("--request-timeout-s", a->request_timeout_s,
                  "Longest wait of one request step before it fails (default 60)");
  sub->add_option("--peer-timeout-s", a->peer_timeout_s,
                  "Transfer peer silent this long with work outstanding is dead (default 5)");
  AddMetricsOptions(sub, &a->metrics);
  AddTlsFlags(sub, &a->tls, /*serves=*/true);
  sub->add_option("--transfer-token-file", a->transfer_token_file,
                  "The cluster's transfer token (owner-only file): transfer peers must prove "
                  "they hold it (required unless --insecure)");
  sub->add_option("--kv-store-etcd", a->o.kv_store_etcd,
                  "Distributed KV store (docs/store.md \"In the system\"): etcd endpoints "
                  "HOST:PORT[,...]; hit blocks missing in the node's tier are read "
                  "from the store, written blocks are put into it (default: no store)");
  sub->add_option("--kv-store-cluster", a->o.kv_store_cluster,
                  "The store cluster's name (with --kv-store-etcd)");
  AddPeerTlsFlags(sub, &a->kv_store_tls, "kv-store", "the KV store's etcd and masters");
  sub->add_option("--kv-store-node", a->o.kv_store_node,
                  "The id of the store node on this node (preferred for puts; 0: none)");
  sub->add_option("--kv-store-host", a->o.kv_store_host,
                  "Host name the store nodes on this node advertise (default: --node)");
  sub->add_option("--kv-store-stats", a->o.kv_store_stats_path,
                  "Write the store link's counters (JSON) here at exit");
  sub->callback([a, exit_code] { *exit_code = RunEngine(*a); });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
