// `dualpath store master|...`: the distributed KV store's processes (docs/store.md).
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/tls_flags.h"
#include "dualpath/common/log.h"
#include "dualpath/common/splitmix.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/store/client.h"
#include "dualpath/store/master_server.h"
#include "dualpath/store/node.h"
#include "dualpath/transfer/token.h"

namespace dualpath::cli {
namespace {

struct EtcdArgs {
  std::string endpoints;
  GrpcTlsFiles tls;
  double rpc_timeout_s = 5.0;
};

void AddEtcdFlags(CLI::App* app, EtcdArgs* a) {
  app->add_option("--etcd", a->endpoints, "etcd endpoints: HOST:PORT[,HOST:PORT...] or unix:PATH")
      ->required();
  app->add_option("--etcd-tls-cert", a->tls.cert, "client certificate towards etcd (PEM)");
  app->add_option("--etcd-tls-key", a->tls.key, "its private key (PEM, mode 0600)");
  app->add_option("--etcd-tls-ca", a->tls.ca, "CA that signed etcd's certificate (PEM)");
  app->add_flag("--etcd-insecure", a->tls.insecure, "plaintext towards etcd (warned)");
  app->add_option("--etcd-timeout", a->rpc_timeout_s, "deadline of each etcd call, seconds")
      ->capture_default_str();
}

Result<coord::EtcdOptions> LoadEtcd(const EtcdArgs& a) {
  coord::EtcdOptions o;
  o.endpoints = a.endpoints;
  if (!(a.rpc_timeout_s > 0)) return InvalidArgument("--etcd-timeout must be > 0 seconds");
  o.rpc_timeout = static_cast<Nanos>(a.rpc_timeout_s * 1e9);
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) {
    return Status(tls.status().code(), "etcd TLS (--etcd-tls-*): " + tls.status().message());
  }
  o.tls = *tls;
  return o;
}

// Blocks SIGTERM/SIGINT in every thread started after it and waits for one.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }
  int Wait() {
    int sig = 0;
    sigwait(&signals_, &sig);
    return sig;
  }

 private:
  sigset_t signals_;
};

struct MasterArgs {
  std::string cluster;
  EtcdArgs etcd;
  std::string listen;
  std::string advertise;
  GrpcTlsFiles tls;
  GrpcTlsFiles node_tls;
  double election_ttl_s = 10;
  std::optional<double> join_grace_s;  // unset: derived from the nodes' leases
  double put_timeout_s = 30;
  double pin_ttl_s = 10;
};

int Master(const MasterArgs& a) {
  store::MasterServerOptions o;
  o.cluster = a.cluster;
  Result<coord::EtcdOptions> etcd = LoadEtcd(a.etcd);
  if (!etcd.ok()) return ReportError("store master", etcd.status());
  o.etcd = *etcd;
  o.listen = a.listen;
  o.advertise = a.advertise;
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) return ReportError("store master", tls.status());
  o.tls = *tls;
  // Towards the nodes: the same files unless given (--node-tls-*).
  GrpcTlsFiles nf = a.node_tls;
  if (nf.cert.empty() && nf.key.empty() && nf.ca.empty() && !nf.insecure) nf = a.tls;
  Result<GrpcTls> node_tls = LoadGrpcTls(nf);
  if (!node_tls.ok()) return ReportError("store master: node TLS", node_tls.status());
  o.node_tls = *node_tls;
  for (auto [v, name] :
       {std::pair{a.election_ttl_s, "--election-ttl"},
        std::pair{a.join_grace_s.value_or(0), "--join-grace"},
        std::pair{a.put_timeout_s, "--put-timeout"}, std::pair{a.pin_ttl_s, "--pin-ttl"}}) {
    if (!(v >= 0) || v > 86400) {
      return ReportError("store master",
                         InvalidArgument(std::string(name) + " must be 0 .. 86400 seconds"));
    }
  }
  o.election_ttl = static_cast<Nanos>(a.election_ttl_s * 1e9);
  if (a.join_grace_s) o.join_grace = static_cast<Nanos>(*a.join_grace_s * 1e9);
  o.state.put_timeout = static_cast<Nanos>(a.put_timeout_s * 1e9);
  o.state.pin_ttl = static_cast<Nanos>(a.pin_ttl_s * 1e9);

  SignalWaiter signals;
  auto server = store::MasterServer::Start(std::move(o));
  if (!server.ok()) return ReportError("store master", server.status());
  std::cout << "listening on " << (*server)->address() << std::endl;
  const int sig = signals.Wait();
  log::Info("store master: signal {}: resigning", sig);
  (*server)->Shutdown();
  return kExitOk;
}

// --ucx-net-devices as UCX_NET_DEVICES (the testbed's namespaces have two interfaces: comp0 keeps
// store traffic on the compute link); the environment's own setting wins.
void SetUcxNetDevices(const std::string& devices) {
  if (std::getenv("UCX_NET_DEVICES") != nullptr || devices.empty()) return;
  setenv("UCX_NET_DEVICES", devices.c_str(), 1);
}

struct NodeArgs {
  std::string cluster;
  EtcdArgs etcd;
  uint32_t id = 0;
  std::string host;
  uint64_t dram_mib = 1024;
  double high = 0;
  double low = 0;
  std::string shm_dir = "/dev/shm";
  std::string transfer_listen = "127.0.0.1:0";
  std::string ucx_tls = "tcp";
  std::string ucx_net_devices;
  std::string transfer_token_file;
  std::string rpc_listen = "127.0.0.1:0";
  GrpcTlsFiles tls;
  GrpcTlsFiles master_tls;
  double ttl_s = 10;
};

int Node(const NodeArgs& a) {
  store::NodeOptions o;
  o.cluster = a.cluster;
  Result<coord::EtcdOptions> etcd = LoadEtcd(a.etcd);
  if (!etcd.ok()) return ReportError("store node", etcd.status());
  o.etcd = *etcd;
  if (a.id == 0) return ReportError("store node", InvalidArgument("--id must be >= 1"));
  o.id = NodeId(a.id);
  o.host = a.host;
  if (a.dram_mib == 0 || a.dram_mib > (1ull << 30)) {
    return ReportError("store node", InvalidArgument("--dram-mib must be 1 .. 2^30"));
  }
  o.dram_bytes = a.dram_mib << 20;
  o.high_watermark = a.high;
  o.low_watermark = a.low;
  o.shm_dir = a.shm_dir;
  o.transfer_listen = a.transfer_listen;
  o.transfer.ucx_tls = a.ucx_tls;
  if (!a.transfer_token_file.empty()) {
    Result<std::string> token = transfer::ReadTransferToken(a.transfer_token_file);
    if (!token.ok()) return ReportError("store node", token.status());
    o.transfer.token = *token;
  }
  o.rpc_listen = a.rpc_listen;
  Result<GrpcTls> tls = LoadGrpcTls(a.tls);
  if (!tls.ok()) return ReportError("store node", tls.status());
  o.rpc_tls = *tls;
  GrpcTlsFiles mf = a.master_tls;
  if (mf.cert.empty() && mf.key.empty() && mf.ca.empty() && !mf.insecure) mf = a.tls;
  Result<GrpcTls> master_tls = LoadGrpcTls(mf);
  if (!master_tls.ok()) return ReportError("store node: master TLS", master_tls.status());
  o.master_tls = *master_tls;
  if (!(a.ttl_s >= 1) || a.ttl_s > 3600) {
    return ReportError("store node", InvalidArgument("--ttl must be 1 .. 3600 seconds"));
  }
  o.membership_ttl = static_cast<Nanos>(a.ttl_s * 1e9);
  SetUcxNetDevices(a.ucx_net_devices);

  SignalWaiter signals;
  auto node = store::StoreNode::Start(std::move(o));
  if (!node.ok()) return ReportError("store node", node.status());
  const store::NodeAddress& ad = (*node)->address();
  std::cout << "store node " << ad.id.value() << ": transfer " << ad.transfer_addr << " rpc "
            << ad.rpc_addr << " shm " << ad.shm_path << std::endl;
  const int sig = signals.Wait();
  log::Info("store node: signal {}: leaving", sig);
  if (Status s = (*node)->Shutdown(); !s.ok()) return ReportError("store node", s);
  return kExitOk;
}

struct BenchArgs {
  std::string cluster;
  EtcdArgs etcd;
  GrpcTlsFiles master_tls;
  std::string host;
  uint32_t local_node = 0;
  bool no_local_shm = false;
  std::string shm_dir = "/dev/shm";
  std::string ucx_tls = "tcp";
  std::string ucx_net_devices;
  std::string transfer_token_file;
  uint64_t size = 1 << 20;
  uint64_t count = 256;
  uint64_t batch = 8;
  uint32_t replicas = 1;
  uint64_t seed = 1;
  std::string phase = "both";
  bool registered = false;
  bool expect_all = false;
  double retry_s = 15;
};

// Object i of a bench run: its key and its bytes are functions of (seed, i), so a later process
// (another phase, after a fault) can check what it reads.
store::ObjectKey BenchKey(uint64_t seed, uint64_t i) {
  store::ObjectKey k;
  k.model_fingerprint = 0xBE7C'0000'0000'0000ULL | (seed & 0xFFFF'FFFF);
  SplitMix64 rng(SplitMix64::Mix(seed) ^ i);
  for (size_t w = 0; w < 4; ++w) {
    const uint64_t v = rng.Next();
    std::memcpy(k.hash.bytes.data() + 8 * w, &v, 8);
  }
  return k;
}

void BenchFill(uint64_t seed, uint64_t i, std::span<std::byte> out) {
  SplitMix64 rng(seed ^ (i * 0xD1B54A32D192ED03ULL));
  for (size_t off = 0; off < out.size(); off += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(out.data() + off, &v, std::min<size_t>(8, out.size() - off));
  }
}

int Bench(const BenchArgs& a) {
  if (a.size == 0 || a.size > (1ull << 30)) {
    return ReportError("store bench", InvalidArgument("--size must be 1 .. 2^30 bytes"));
  }
  if (a.count == 0 || a.batch == 0 || a.batch > a.count) {
    return ReportError("store bench", InvalidArgument("--count and --batch must be >= 1, "
                                                      "--batch <= --count"));
  }
  if (a.phase != "put" && a.phase != "get" && a.phase != "both") {
    return ReportError("store bench", InvalidArgument("--phase must be put, get or both"));
  }
  if (a.size * a.batch > (8ull << 30)) {
    return ReportError("store bench", InvalidArgument("--size x --batch must be <= 8 GiB"));
  }
  store::ClientOptions o;
  o.cluster = a.cluster;
  Result<coord::EtcdOptions> etcd = LoadEtcd(a.etcd);
  if (!etcd.ok()) return ReportError("store bench", etcd.status());
  o.etcd = *etcd;
  Result<GrpcTls> mt = LoadGrpcTls(a.master_tls);
  if (!mt.ok()) return ReportError("store bench: master TLS", mt.status());
  o.master_tls = *mt;
  o.local_node = NodeId(a.local_node);
  o.host = a.host;
  o.local_shm = !a.no_local_shm;
  o.shm_dir = a.shm_dir;
  o.transfer.ucx_tls = a.ucx_tls;
  if (!a.transfer_token_file.empty()) {
    Result<std::string> token = transfer::ReadTransferToken(a.transfer_token_file);
    if (!token.ok()) return ReportError("store bench", token.status());
    o.transfer.token = *token;
  }
  o.replicas = a.replicas;
  o.retry_deadline = static_cast<Nanos>(a.retry_s * 1e9);
  SetUcxNetDevices(a.ucx_net_devices);
  auto client = store::StoreClient::Create(std::move(o));
  if (!client.ok()) return ReportError("store bench", client.status());
  store::StoreClient& c = **client;

  std::vector<std::byte> buf(a.size * a.batch);
  if (a.registered) {
    if (Status s = c.RegisterBuffer(buf.data(), buf.size()); !s.ok()) {
      return ReportError("store bench: --registered", s);
    }
  }
  std::vector<std::byte> expect(a.size);
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  if (a.phase != "get") {
    uint64_t failed = 0;
    const auto t0 = Clock::now();
    for (uint64_t first = 0; first < a.count; first += a.batch) {
      const uint64_t n = std::min(a.batch, a.count - first);
      std::vector<store::PutItem> items(n);
      for (uint64_t j = 0; j < n; ++j) {
        std::span<std::byte> slot(buf.data() + j * a.size, a.size);
        BenchFill(a.seed, first + j, slot);
        items[j] = store::PutItem{BenchKey(a.seed, first + j), slot};
      }
      Result<std::vector<Status>> r = c.Put(items);
      if (!r.ok()) return ReportError("store bench: put", r.status());
      size_t batch_failed = 0;
      for (const Status& s : *r) {
        if (!s.ok()) {
          ++batch_failed;
          if (failed++ == 0) log::Warn("store bench: put failed: {}", s.ToString());
        }
      }
      // A batch none of whose puts went through (no master, no node): stop, saying why.
      if (batch_failed == n) return ReportError("store bench: put", (*r)[0]);
    }
    const double t = seconds(t0);
    std::cout << fmt::format("put: {} objects x {} B in {:.3f} s = {:.3f} Gbit/s, {} failed",
                             a.count, a.size, t, 8.0 * a.count * a.size / t / 1e9, failed)
              << std::endl;
    if (failed > 0 && a.expect_all) return kExitFailure;
  }
  if (a.phase != "put") {
    uint64_t hits = 0, local = 0, remote = 0, misses = 0, wrong = 0;
    const auto t0 = Clock::now();
    for (uint64_t first = 0; first < a.count; first += a.batch) {
      const uint64_t n = std::min(a.batch, a.count - first);
      std::vector<store::GetItem> items(n);
      for (uint64_t j = 0; j < n; ++j) {
        items[j] = store::GetItem{BenchKey(a.seed, first + j),
                                  std::span<std::byte>(buf.data() + j * a.size, a.size)};
      }
      Result<std::vector<store::ReadResult>> r = c.GetInto(items);
      if (!r.ok()) return ReportError("store bench: get", r.status());
      for (uint64_t j = 0; j < n; ++j) {
        const store::ReadResult& rr = (*r)[j];
        if (!rr.status.ok()) {
          ++misses;
          continue;
        }
        ++hits;
        (rr.source == store::ReadSource::kLocal ? local : remote) += 1;
        BenchFill(a.seed, first + j, expect);
        if (rr.size != a.size || std::memcmp(expect.data(), buf.data() + j * a.size, a.size) != 0) {
          ++wrong;
        }
      }
    }
    const double t = seconds(t0);
    std::cout << fmt::format(
                     "get: {} objects x {} B in {:.3f} s = {:.3f} Gbit/s of hits; hits {} (local "
                     "{}, remote {}), misses {}, wrong {}; replicas rejected {}",
                     a.count, a.size, t, 8.0 * hits * a.size / t / 1e9, hits, local, remote, misses,
                     wrong, c.Stats().rejected)
              << std::endl;
    if (wrong > 0) return kExitFailure;
    if (a.expect_all && misses > 0) return kExitFailure;
  }
  return kExitOk;
}

struct StatsArgs {
  std::string cluster;
  EtcdArgs etcd;
  GrpcTlsFiles master_tls;
  double retry_s = 5;
  uint64_t min_nodes = 0;
};

// One JSON line: the leader's Stats (`cluster run --store` reads it for each node's DRAM used and
// to wait until every node joined). With --min-nodes, exit 1 while fewer nodes are joined.
int Stats(const StatsArgs& a) {
  store::ClientOptions o;
  o.cluster = a.cluster;
  Result<coord::EtcdOptions> etcd = LoadEtcd(a.etcd);
  if (!etcd.ok()) return ReportError("store stats", etcd.status());
  o.etcd = *etcd;
  Result<GrpcTls> mt = LoadGrpcTls(a.master_tls);
  if (!mt.ok()) return ReportError("store stats: master TLS", mt.status());
  o.master_tls = *mt;
  o.local_shm = false;
  o.retry_deadline = static_cast<Nanos>(a.retry_s * 1e9);
  auto client = store::StoreClient::Create(std::move(o));
  if (!client.ok()) return ReportError("store stats", client.status());
  Result<store::LeaderStatsReply> st = (*client)->LeaderStats();
  if (!st.ok()) return ReportError("store stats", st.status());
  std::string usage;
  for (const store::LeaderNodeUsage& u : st->usage) {
    usage += fmt::format(
        "{}{{\"node\":{},\"dram_capacity\":{},\"dram_used\":{},"
        "\"dram_replicas\":{}}}",
        usage.empty() ? "" : ",", u.node.value(), u.dram_capacity, u.dram_used, u.dram_replicas);
  }
  std::cout << fmt::format(
                   "{{\"leader\":\"{}\",\"leader_id\":\"{}\",\"nodes\":{},\"objects\":{},"
                   "\"pending_puts\":{},\"evicted_replicas\":{},\"usage\":[{}]}}",
                   (*client)->leader(), st->leader_id, st->nodes, st->objects, st->pending_puts,
                   st->evicted_replicas, usage)
            << std::endl;
  return st->nodes >= a.min_nodes ? kExitOk : kExitFailure;
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* store = root.add_subcommand(
      "store", "the distributed KV store: master and node processes (docs/store.md)");
  store->require_subcommand(1);

  auto m = std::make_shared<MasterArgs>();
  CLI::App* master = store->add_subcommand(
      "master", "serve StoreMaster; campaign for leadership through etcd (run two or more)");
  master->add_option("--cluster", m->cluster, "cluster name: etcd keys /dualpath/<cluster>/")
      ->required();
  AddEtcdFlags(master, &m->etcd);
  master->add_option("--listen", m->listen, "StoreMaster address: HOST:PORT or unix:PATH")
      ->required();
  master->add_option("--advertise", m->advertise,
                     "address clients dial, written in the leader key (default: the bound one)");
  AddTlsFlags(master, &m->tls, /*serves=*/true);
  master->add_option("--node-tls-cert", m->node_tls.cert, "towards the nodes (default: --tls-*)");
  master->add_option("--node-tls-key", m->node_tls.key, "its key");
  master->add_option("--node-tls-ca", m->node_tls.ca, "CA of the nodes' certificates");
  master->add_flag("--node-insecure", m->node_tls.insecure, "plaintext towards the nodes");
  master->add_option("--election-ttl", m->election_ttl_s, "leader lease TTL, seconds")
      ->capture_default_str();
  master->add_option("--join-grace", m->join_grace_s,
                     "a new leader serves after this long even if listed nodes did not join "
                     "(default: the listed nodes' longest remaining lease TTL + 2 s)");
  master->add_option("--put-timeout", m->put_timeout_s, "uncommitted puts reclaimed after, s")
      ->capture_default_str();
  master->add_option("--pin-ttl", m->pin_ttl_s, "readers' pins expire after, s")
      ->capture_default_str();
  master->callback([m, exit_code] { *exit_code = Master(*m); });

  auto n = std::make_shared<NodeArgs>();
  CLI::App* node = store->add_subcommand(
      "node", "contribute this node's DRAM tier to the store; serve reads and writes of it");
  node->add_option("--cluster", n->cluster, "cluster name: etcd keys /dualpath/<cluster>/")
      ->required();
  AddEtcdFlags(node, &n->etcd);
  node->add_option("--id", n->id, "node id, >= 1 (registered as store-node-<id>)")->required();
  node->add_option("--host", n->host,
                   "host name clients compare to map the DRAM tier file "
                   "(default: gethostname)");
  node->add_option("--dram-mib", n->dram_mib, "DRAM tier size, MiB")->capture_default_str();
  node->add_option("--high-watermark", n->high, "evict above this fraction (0: master default)");
  node->add_option("--low-watermark", n->low, "evict down to this fraction (0: master default)");
  node->add_option("--shm-dir", n->shm_dir, "where the DRAM tier file lives")
      ->capture_default_str();
  node->add_option("--transfer-listen", n->transfer_listen,
                   "transfer engine listener HOST:PORT (HOST is what peers dial)")
      ->capture_default_str();
  node->add_option("--ucx-tls", n->ucx_tls, "UCX_TLS of the transfer engine")
      ->capture_default_str();
  node->add_option("--ucx-net-devices", n->ucx_net_devices, "UCX_NET_DEVICES (e.g. comp0)");
  node->add_option("--transfer-token-file", n->transfer_token_file,
                   "the cluster's transfer token (peers must hold the same)");
  node->add_option("--rpc-listen", n->rpc_listen, "StoreNode gRPC listener HOST:PORT or unix:PATH")
      ->capture_default_str();
  AddTlsFlags(node, &n->tls, /*serves=*/true);
  node->add_option("--master-tls-cert", n->master_tls.cert, "towards the master (default --tls-*)");
  node->add_option("--master-tls-key", n->master_tls.key, "its key");
  node->add_option("--master-tls-ca", n->master_tls.ca, "CA of the masters' certificates");
  node->add_flag("--master-insecure", n->master_tls.insecure, "plaintext towards the masters");
  node->add_option("--ttl", n->ttl_s, "etcd membership lease TTL, seconds")->capture_default_str();
  node->callback([n, exit_code] { *exit_code = Node(*n); });

  auto b = std::make_shared<BenchArgs>();
  auto st = std::make_shared<StatsArgs>();
  CLI::App* stats = store->add_subcommand(
      "stats", "print the leader master's Stats as one JSON line (nodes, objects, DRAM per node)");
  stats->add_option("--cluster", st->cluster, "cluster name")->required();
  AddEtcdFlags(stats, &st->etcd);
  stats->add_option("--master-tls-cert", st->master_tls.cert, "client certificate (PEM)");
  stats->add_option("--master-tls-key", st->master_tls.key, "its key");
  stats->add_option("--master-tls-ca", st->master_tls.ca, "CA of the masters' certificates");
  stats->add_flag("--master-insecure", st->master_tls.insecure, "plaintext towards the masters");
  stats->add_option("--retry", st->retry_s, "how long to look for a leader, seconds")
      ->capture_default_str();
  stats->add_option("--min-nodes", st->min_nodes, "exit 1 unless at least this many nodes joined");
  stats->callback([st, exit_code] { *exit_code = Stats(*st); });

  CLI::App* bench = store->add_subcommand(
      "bench", "put and get-into objects through the store client; check every byte read");
  bench->add_option("--cluster", b->cluster, "cluster name")->required();
  AddEtcdFlags(bench, &b->etcd);
  bench->add_option("--master-tls-cert", b->master_tls.cert, "client certificate (PEM)");
  bench->add_option("--master-tls-key", b->master_tls.key, "its key");
  bench->add_option("--master-tls-ca", b->master_tls.ca, "CA of the masters' certificates");
  bench->add_flag("--master-insecure", b->master_tls.insecure, "plaintext towards the masters");
  bench->add_option("--host", b->host, "this client's host name (default: gethostname)");
  bench->add_option("--local-node", b->local_node, "the node beside this client (0: none)");
  bench->add_flag("--no-local-shm", b->no_local_shm, "never map a same-host node's tier file");
  bench->add_option("--shm-dir", b->shm_dir, "where same-host nodes keep their tier files")
      ->capture_default_str();
  bench->add_option("--ucx-tls", b->ucx_tls, "UCX_TLS")->capture_default_str();
  bench->add_option("--ucx-net-devices", b->ucx_net_devices, "UCX_NET_DEVICES (e.g. comp0)");
  bench->add_option("--transfer-token-file", b->transfer_token_file, "the transfer token");
  bench->add_option("--size", b->size, "bytes per object")->capture_default_str();
  bench->add_option("--count", b->count, "objects")->capture_default_str();
  bench->add_option("--batch", b->batch, "objects per put or get call")->capture_default_str();
  bench->add_option("--replicas", b->replicas, "replicas per put (1..3)")->capture_default_str();
  bench->add_option("--seed", b->seed, "key and content space (phases must agree)")
      ->capture_default_str();
  bench->add_option("--phase", b->phase, "put, get or both")->capture_default_str();
  bench->add_flag("--registered", b->registered, "gets land in a registered buffer (zero-copy)");
  bench->add_flag("--expect-all", b->expect_all, "exit 1 on any failed put or missed get");
  bench->add_option("--retry", b->retry_s, "retry deadline of each call, seconds")
      ->capture_default_str();
  bench->callback([b, exit_code] { *exit_code = Bench(*b); });
}

}  // namespace

DUALPATH_CLI_COMMAND(Register);

}  // namespace dualpath::cli
