// `dualpath store master|...`: the distributed KV store's processes (docs/store.md).
#include <fmt/format.h>

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
#include "dualpath/common/numeric.h"
#include "dualpath/common/splitmix.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/store/client.h"
#include "dualpath/store/master_server.h"
#include "dualpath/store/node.h"
#include "dualpath/transfer/token.h"

namespace dualpath::cli {
namespace {

// Input ranges (docs/store.md "Input ranges"), checked before anything binds or connects.
constexpr double kMaxRpcTimeoutS = 3600;  // one etcd call: beyond, a dead etcd is never noticed
constexpr double kMaxLeaseS = 3600;       // coord's lease TTL limit (election, membership)
constexpr double kMaxWaitS = 86'400;      // grace, put timeout, pin TTL, retry deadline: a day
constexpr uint64_t kMaxDramMib = uint64_t{1} << 30;  // 1 PiB: more than any node's DRAM
constexpr uint64_t kMaxObjectBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxBenchObjects = uint64_t{1} << 32;
constexpr uint64_t kMaxBenchBufferBytes = uint64_t{8} << 30;  // --size x --batch, one buffer
constexpr uint64_t kMaxNodeId = UINT32_MAX;

// A seconds flag checked against [lo, hi] and converted: nothing out of range reaches the
// conversion (1e300 s would not fit in Nanos).
Status SecondsFlag(std::string_view flag, double seconds, double lo, double hi, Nanos* out) {
  RETURN_IF_ERROR(CheckRange(flag, seconds, lo, hi, "s"));
  *out = FromSeconds(seconds);
  return Status::Ok();
}

struct EtcdArgs {
  std::string endpoints;
  GrpcTlsFiles tls;  // --etcd-tls-*, --etcd-insecure; none given: the command's --tls-*
  double rpc_timeout_s = 5.0;
};

void AddEtcdFlags(CLI::App* app, EtcdArgs* a) {
  app->add_option("--etcd", a->endpoints, "etcd endpoints: HOST:PORT[,HOST:PORT...] or unix:PATH")
      ->required();
  AddPeerTlsFlags(app, &a->tls, "etcd", "etcd");
  app->add_option("--etcd-timeout", a->rpc_timeout_s, "deadline of each etcd call, seconds")
      ->capture_default_str();
}

// `own`: the command's --tls-* / --insecure, what etcd is reached with unless --etcd-* are given.
Result<coord::EtcdOptions> LoadEtcd(const EtcdArgs& a, const GrpcTlsFiles& own) {
  coord::EtcdOptions o;
  o.endpoints = a.endpoints;
  RETURN_IF_ERROR(
      SecondsFlag("--etcd-timeout", a.rpc_timeout_s, 0.001, kMaxRpcTimeoutS, &o.rpc_timeout));
  ASSIGN_OR_RETURN(o.tls, LoadGrpcTlsOr(a.tls, own));
  return o;
}

// After a clean stop on `sig`: the one line and the exit status every service gives (docs/cli.md
// "Exit statuses": 130 for SIGINT, 143 for SIGTERM).
int StoppedBy(std::string_view what, int sig) {
  std::cerr << "dualpath " << what << ": stopped by " << StopSignalName(sig) << "\n";
  return StopExitCode(sig);
}

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

// Every flag of `store master` checked and loaded (bad input: kInvalidArgument naming the flag).
Result<store::MasterServerOptions> MasterOptions(const MasterArgs& a) {
  store::MasterServerOptions o;
  o.cluster = a.cluster;
  ASSIGN_OR_RETURN(o.etcd, LoadEtcd(a.etcd, a.tls));
  o.listen = a.listen;
  o.advertise = a.advertise;
  ASSIGN_OR_RETURN(o.tls, LoadGrpcTls(a.tls));
  // Towards the nodes: the same files unless --node-tls-* are given.
  ASSIGN_OR_RETURN(o.node_tls, LoadGrpcTlsOr(a.node_tls, a.tls));
  RETURN_IF_ERROR(SecondsFlag("--election-ttl", a.election_ttl_s, 1, kMaxLeaseS, &o.election_ttl));
  if (a.join_grace_s) {  // unset: the leader derives it from the listed nodes' leases
    Nanos grace = 0;
    RETURN_IF_ERROR(SecondsFlag("--join-grace", *a.join_grace_s, 0, kMaxWaitS, &grace));
    o.join_grace = grace;
  }
  RETURN_IF_ERROR(
      SecondsFlag("--put-timeout", a.put_timeout_s, 0.001, kMaxWaitS, &o.state.put_timeout));
  RETURN_IF_ERROR(SecondsFlag("--pin-ttl", a.pin_ttl_s, 0.001, kMaxWaitS, &o.state.pin_ttl));
  return o;
}

int Master(const MasterArgs& a) {
  Result<store::MasterServerOptions> o = MasterOptions(a);
  if (!o.ok()) return ReportError("store master", o.status());
  const StopSignalWaiter signals;
  auto server = store::MasterServer::Start(std::move(*o));
  if (!server.ok()) return ReportError("store master", server.status());
  std::cout << "listening on " << (*server)->address() << std::endl;
  const int sig = signals.Wait();
  log::Info("store master: signal {}: resigning", sig);
  (*server)->Shutdown();
  return StoppedBy("store master", sig);
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
  uint64_t id = 0;
  std::string host;
  uint64_t dram_mib = 1024;
  double high = 0;
  double low = 0;
  std::string shm_dir = "/dev/shm";
  std::string transfer_listen = "127.0.0.1:0";
  std::string ucx_tls = "tcp";
  std::string ucx_net_devices;
  std::string transfer_token_file;
  uint64_t transfer_poll_us = 200;
  std::string rpc_listen = "127.0.0.1:0";
  GrpcTlsFiles tls;
  GrpcTlsFiles master_tls;
  double ttl_s = 10;
};

// Every flag of `store node` checked and loaded (bad input: kInvalidArgument naming the flag).
Result<store::NodeOptions> NodeOptionsOf(const NodeArgs& a) {
  store::NodeOptions o;
  o.cluster = a.cluster;
  ASSIGN_OR_RETURN(o.etcd, LoadEtcd(a.etcd, a.tls));
  RETURN_IF_ERROR(CheckCountRange("--id", a.id, 1, kMaxNodeId, ""));
  o.id = NodeId(static_cast<uint32_t>(a.id));
  o.host = a.host;
  RETURN_IF_ERROR(CheckCountRange("--dram-mib", a.dram_mib, 1, kMaxDramMib, "MiB"));
  o.dram_bytes = a.dram_mib << 20;
  RETURN_IF_ERROR(CheckRange("--high-watermark", a.high, 0, 1, "(fraction; 0: the default)"));
  RETURN_IF_ERROR(CheckRange("--low-watermark", a.low, 0, 1, "(fraction; 0: the default)"));
  o.high_watermark = a.high;
  o.low_watermark = a.low;
  o.shm_dir = a.shm_dir;
  o.transfer_listen = a.transfer_listen;
  o.transfer.ucx_tls = a.ucx_tls;
  if (!a.transfer_token_file.empty()) {
    ASSIGN_OR_RETURN(o.transfer.token, transfer::ReadTransferToken(a.transfer_token_file));
  }
  RETURN_IF_ERROR(CheckCountRange("--transfer-poll-us", a.transfer_poll_us, 0, 100000,
                                  "us (0: sleep at once)"));
  o.transfer.busy_poll = a.transfer_poll_us > 0;
  o.transfer.idle_spin = static_cast<Nanos>(a.transfer_poll_us) * kNanosPerMicro;
  o.rpc_listen = a.rpc_listen;
  ASSIGN_OR_RETURN(o.rpc_tls, LoadGrpcTls(a.tls));
  // Towards the masters: the same files unless --master-tls-* are given.
  ASSIGN_OR_RETURN(o.master_tls, LoadGrpcTlsOr(a.master_tls, a.tls));
  RETURN_IF_ERROR(SecondsFlag("--ttl", a.ttl_s, 1, kMaxLeaseS, &o.membership_ttl));
  return o;
}

int Node(const NodeArgs& a) {
  Result<store::NodeOptions> o = NodeOptionsOf(a);
  if (!o.ok()) return ReportError("store node", o.status());
  SetUcxNetDevices(a.ucx_net_devices);

  const StopSignalWaiter signals;
  auto node = store::StoreNode::Start(std::move(*o));
  if (!node.ok()) return ReportError("store node", node.status());
  const store::NodeAddress& ad = (*node)->address();
  std::cout << "store node " << ad.id.value() << ": transfer " << ad.transfer_addr << " rpc "
            << ad.rpc_addr << " shm " << ad.shm_path << std::endl;
  const int sig = signals.Wait();
  log::Info("store node: signal {}: leaving", sig);
  if (Status s = (*node)->Shutdown(); !s.ok()) return ReportError("store node", s);
  return StoppedBy("store node", sig);
}

// What `store bench` and `store stats` share: how they reach etcd and the leader master.
struct ClientArgs {
  std::string cluster;
  EtcdArgs etcd;
  GrpcTlsFiles tls;         // --tls-*, --insecure: towards etcd and the masters
  GrpcTlsFiles master_tls;  // --master-tls-*, --master-insecure; none given: --tls-*
  double retry_s = 15;
};

void AddClientFlags(CLI::App* app, ClientArgs* a) {
  app->add_option("--cluster", a->cluster, "cluster name")->required();
  AddEtcdFlags(app, &a->etcd);
  AddTlsFlags(app, &a->tls, /*serves=*/false);
  AddPeerTlsFlags(app, &a->master_tls, "master", "the masters");
}

Result<store::ClientOptions> ClientOptionsOf(const ClientArgs& a) {
  store::ClientOptions o;
  o.cluster = a.cluster;
  ASSIGN_OR_RETURN(o.etcd, LoadEtcd(a.etcd, a.tls));
  ASSIGN_OR_RETURN(o.master_tls, LoadGrpcTlsOr(a.master_tls, a.tls));
  RETURN_IF_ERROR(SecondsFlag("--retry", a.retry_s, 0, kMaxWaitS, &o.retry_deadline));
  return o;
}

struct BenchArgs {
  ClientArgs client;
  std::string host;
  uint64_t local_node = 0;
  bool no_local_shm = false;
  std::string shm_dir = "/dev/shm";
  std::string ucx_tls = "tcp";
  std::string ucx_net_devices;
  std::string transfer_token_file;
  uint64_t size = 1 << 20;
  uint64_t count = 256;
  uint64_t batch = 8;
  uint64_t replicas = 1;
  uint64_t seed = 1;
  std::string phase = "both";
  bool registered = false;
  bool expect_all = false;
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

// Every flag of `store bench` checked and loaded (bad input: kInvalidArgument naming the flag).
Result<store::ClientOptions> BenchOptions(const BenchArgs& a) {
  RETURN_IF_ERROR(CheckCountRange("--size", a.size, 1, kMaxObjectBytes, "bytes"));
  RETURN_IF_ERROR(CheckCountRange("--count", a.count, 1, kMaxBenchObjects, "objects"));
  RETURN_IF_ERROR(CheckCountRange("--batch", a.batch, 1, a.count, "objects (at most --count)"));
  RETURN_IF_ERROR(CheckCountRange("--replicas", a.replicas, 1, 3, ""));
  RETURN_IF_ERROR(CheckCountRange("--local-node", a.local_node, 0, kMaxNodeId, "(0: none)"));
  if (a.phase != "put" && a.phase != "get" && a.phase != "both") {
    return InvalidArgument("--phase must be put, get or both");
  }
  // --size and --batch are each within range, so the product fits in 64 bits.
  RETURN_IF_ERROR(CheckCountRange("--size x --batch", a.size * a.batch, 1, kMaxBenchBufferBytes,
                                  "bytes (one batch's buffer)"));
  ASSIGN_OR_RETURN(store::ClientOptions o, ClientOptionsOf(a.client));
  o.local_node = NodeId(static_cast<uint32_t>(a.local_node));
  o.host = a.host;
  o.local_shm = !a.no_local_shm;
  o.shm_dir = a.shm_dir;
  o.transfer.ucx_tls = a.ucx_tls;
  if (!a.transfer_token_file.empty()) {
    ASSIGN_OR_RETURN(o.transfer.token, transfer::ReadTransferToken(a.transfer_token_file));
  }
  o.replicas = static_cast<uint32_t>(a.replicas);
  return o;
}

int Bench(const BenchArgs& a) {
  Result<store::ClientOptions> o = BenchOptions(a);
  if (!o.ok()) return ReportError("store bench", o.status());
  SetUcxNetDevices(a.ucx_net_devices);
  auto client = store::StoreClient::Create(std::move(*o));
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
  ClientArgs client{.retry_s = 5};
  uint64_t min_nodes = 0;
};

// One JSON line: the leader's Stats (`cluster run --store` reads it for each node's DRAM used and
// to wait until every node joined). With --min-nodes, exit 1 while fewer nodes are joined.
int Stats(const StatsArgs& a) {
  Result<store::ClientOptions> o = ClientOptionsOf(a.client);
  if (!o.ok()) return ReportError("store stats", o.status());
  if (Status s = CheckCountRange("--min-nodes", a.min_nodes, 0, kMaxNodeId, "nodes"); !s.ok()) {
    return ReportError("store stats", s);
  }
  o->local_shm = false;
  auto client = store::StoreClient::Create(std::move(*o));
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
  AddPeerTlsFlags(master, &m->node_tls, "node", "the store nodes");
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
                   "the cluster's transfer token (owner-only file; peers must hold the same); "
                   "required unless --insecure");
  node->add_option("--transfer-poll-us", n->transfer_poll_us,
                   "after each transfer event, poll this long before sleeping (0: sleep at once)")
      ->capture_default_str();
  node->add_option("--rpc-listen", n->rpc_listen, "StoreNode gRPC listener HOST:PORT or unix:PATH")
      ->capture_default_str();
  AddTlsFlags(node, &n->tls, /*serves=*/true);
  AddPeerTlsFlags(node, &n->master_tls, "master", "the masters");
  node->add_option("--ttl", n->ttl_s, "etcd membership lease TTL, seconds")->capture_default_str();
  node->callback([n, exit_code] { *exit_code = Node(*n); });

  auto b = std::make_shared<BenchArgs>();
  auto st = std::make_shared<StatsArgs>();
  CLI::App* stats = store->add_subcommand(
      "stats", "print the leader master's Stats as one JSON line (nodes, objects, DRAM per node)");
  AddClientFlags(stats, &st->client);
  stats->add_option("--retry", st->client.retry_s, "how long to look for a leader, seconds")
      ->capture_default_str();
  stats->add_option("--min-nodes", st->min_nodes, "exit 1 unless at least this many nodes joined");
  stats->callback([st, exit_code] { *exit_code = Stats(*st); });

  CLI::App* bench = store->add_subcommand(
      "bench", "put and get-into objects through the store client; check every byte read");
  AddClientFlags(bench, &b->client);
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
  bench->add_option("--retry", b->client.retry_s, "retry deadline of each call, seconds")
      ->capture_default_str();
  bench->callback([b, exit_code] { *exit_code = Bench(*b); });
}

}  // namespace

DUALPATH_CLI_COMMAND(Register);

}  // namespace dualpath::cli
