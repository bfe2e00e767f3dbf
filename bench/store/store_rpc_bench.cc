// The store master over gRPC (issue 16, acceptance 3; issue 27, acceptance 3: `exists` >= 3 M
// keys/s over gRPC on one client thread): Exists over 1,000-key batches through a real
// `MasterServer` (a real etcd elects it; one node joined with a report of 1 M objects), and the
// same batches on an in-process MasterState holding the same objects, the same-run baseline.
//
//   ExistsRpc/hits:1|0/proc:0|1
//                           one client thread calls StoreMaster.Exists on 127.0.0.1 with the
//                           generated stub, one 1,000-key call at a time, plaintext (the figure
//                           of earlier runs)
//   ExistsClient/hits:1|0/tls:0|1/in_flight:1|4/proc:0|1/poll:1|0
//                           StoreClient::Exists of 1,000 hashes, what users call: one API call
//                           from one thread, which the library sends as `in_flight` calls of 250
//                           keys in flight together (in_flight 1: one call, the library's earlier
//                           behaviour, the baseline); tls:1 is mutual TLS (what `cluster up/run
//                           --store` uses), tls:0 plaintext (--insecure), each its own master;
//                           poll:1 is the library's default (the calling thread polls for the
//                           answer, ClientOptions::exists_poll), poll:0 sleeps until it comes (the
//                           behaviour before, the same run's baseline; in_flight:1 only)
//   ExistsLocal/hits:1|0    MasterState::Exists of the same batches in this thread
// proc:0 runs the master in this process (the figures of earlier runs), proc:1 in a process of
// its own (this program with --serve-master), as `dualpath store master` runs apart from its
// clients: gRPC's pollers are per process, so the two differ in how a call's wake-ups go.
// items_per_second is keys/s; bench/store/exists_ratio.sh prints the ratios. "One client thread":
// every call is issued and its answer awaited by the benchmark's one thread (with calls in flight,
// that thread also polls their completion queue: gRPC adds no client thread for them); the
// master's gRPC handler threads run on the machine's other core.
// keys_per_cpu_s divides the keys by the CPU time of this whole process (client thread, gRPC
// threads, and with proc:0 the master) plus, with proc:1, the master process's: on a machine
// shared with other builds the wall-clock rate measures the load, this one the work.
// switches_per_call: the context switches of those processes per 1,000-key call (a call answered
// with no hop between threads would take two: the client's wait and the master's).
//
// Needs Debian's etcd (/usr/bin/etcd); exits 2 saying so when it is missing.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/grpc_tls_pki.h"
#include "dualpath/common/spawn.h"
#include "dualpath/coord/etcd_test_server.h"
#include "dualpath/coord/membership.h"
#include "dualpath/store/client.h"
#include "dualpath/store/master_server.h"
#include "dualpath/store/master_state.h"
#include "dualpath/store/types.h"
#include "dualpath/store/v1/store.grpc.pb.h"

namespace dualpath::store {
namespace {

namespace pb = ::dualpath::store::v1;

constexpr uint64_t kObjects = 1'000'000;
constexpr size_t kBatch = 1000;
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kFingerprint = 0xD1A1'0000'0000'0001ULL;

ObjectKey Key(uint64_t i) {
  ObjectKey k;
  k.model_fingerprint = kFingerprint;
  uint64_t x = i;
  for (size_t w = 0; w < 4; ++w) {
    x += 0x9E3779B97F4A7C15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    std::memcpy(k.hash.bytes.data() + 8 * w, &z, 8);
  }
  return k;
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "store_rpc_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(s.code() == Code::kNotFound ? 2 : 1);
}

// A master holding the 1 M objects: plaintext, or mutual TLS (its own cluster name, etcd's
// election of its own), in this process or in a process of its own (`pid`: this program run with
// --serve-master, as `dualpath store master` runs apart from its clients), with the stub that
// joined the node.
struct Master {
  std::string cluster;  // the kind's name, numbered per start (a restarted master is a new one)
  GrpcTls client_tls;
  std::unique_ptr<MasterServer> server;     // in this process
  pid_t pid = -1;                           // in a child process
  std::unique_ptr<coord::Membership> node;  // store node 1's registration, with `server`
  std::unique_ptr<pb::StoreMaster::Stub> stub;
};

// Which master: TLS or plaintext; in its own process or in this one.
struct MasterKind {
  bool tls = false;
  bool own_process = false;
  auto operator<=>(const MasterKind&) const = default;
  std::string Cluster() const {
    return std::string("rpcbench") + (tls ? "tls" : "") + (own_process ? "proc" : "");
  }
};

struct World {
  coord::EtcdTestServer etcd;
  coord::EtcdOptions etcd_options;
  std::string pki_dir;
  std::unique_ptr<coord::EtcdClient> node_etcd;
  std::map<MasterKind, Master> masters;
  int starts = 0;  // masters started so far (numbers their cluster names)
  std::vector<ReportedReplica> reports;
  std::unique_ptr<MasterState> local;
};

World* g_world = nullptr;

// Registers store node 1 of `cluster` in etcd (the node whose report the master is given).
std::unique_ptr<coord::Membership> RegisterNode(coord::EtcdClient* etcd,
                                                const std::string& cluster) {
  coord::MembershipOptions memo;
  memo.cluster = cluster;
  memo.ttl = 60 * kNanosPerSecond;
  auto mem = coord::Membership::Create(etcd, memo);
  if (!mem.ok()) Die("membership", mem.status());
  if (Status s = (*mem)->Register(StoreNodeMemberName(NodeId(1)), "bench", 60 * kNanosPerSecond);
      !s.ok()) {
    Die("register", s);
  }
  return std::move(mem).value();
}

// Options of a master of `cluster` serving on an ephemeral port of 127.0.0.1.
MasterServerOptions MasterOptions(const std::string& cluster, const coord::EtcdOptions& etcd,
                                  const GrpcTls& server_tls, const GrpcTls& node_tls) {
  MasterServerOptions mo;
  mo.cluster = cluster;
  mo.etcd = etcd;
  mo.listen = "127.0.0.1:0";
  mo.tls = server_tls;
  mo.node_tls = node_tls;
  mo.join_grace = 0;
  mo.state.alignment = kBlock;
  return mo;
}

// The TLS files of `who` under the run's PKI directory (mutual TLS, as `cluster run --store`
// issues them).
GrpcTls LoadTls(const std::string& pki_dir, const std::string& who) {
  GrpcTlsFiles f;
  f.cert = PkiCertPath(pki_dir, who);
  f.key = PkiKeyPath(pki_dir, who);
  f.ca = PkiCaPath(pki_dir);
  auto t = LoadGrpcTls(f);
  if (!t.ok()) Die("tls " + who, t.status());
  return *t;
}

// Starts this program as `--serve-master` (ServeMaster below) and answers the child's pid and the
// address it serves on, which it writes to an inherited pipe once it leads.
std::pair<pid_t, std::string> SpawnMaster(const World& world, const std::string& cluster,
                                          bool tls) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) Die("pipe", Status(Code::kIoError, std::strerror(errno)));
  SpawnOptions so;
  so.argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
             "--serve-master",
             world.etcd_options.endpoints,
             cluster,
             tls ? world.pki_dir : "-",
             std::to_string(fds[1])};
  so.output_fd = STDERR_FILENO;  // its log beside ours
  so.inherit_fds = {fds[1]};
  auto pid = SpawnProcess(so);
  close(fds[1]);
  if (!pid.ok()) Die("spawn master", pid.status());
  std::string address;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) address.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  if (address.empty()) Die("master process", Status(Code::kInternal, "exited before it led"));
  return {*pid, address};
}

// The master of `kind`, started, led and joined with the node's report on first use.
Master& StartMaster(World& world, const MasterKind& kind) {
  if (kind.own_process) {
    // Benchmarks of a master apart measure a client's process without a master in it: the
    // in-process masters of earlier benchmarks go (their pollers and etcd watches would take the
    // polling of the client's calls; see below). A later benchmark starts them again.
    std::erase_if(world.masters, [](auto& entry) {
      if (entry.first.own_process) return false;
      entry.second.server->Shutdown();
      return true;
    });
  }
  auto [it, fresh] = world.masters.try_emplace(kind);
  Master& m = it->second;
  if (!fresh) return m;
  const bool tls = kind.tls;
  GrpcTls server_tls;
  if (tls) {
    // A CA of this run: one certificate for the master, one for the client (mTLS, as `cluster
    // run --store` issues them).
    if (world.pki_dir.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "store_rpc_bench_XXXXXX");
      if (mkdtemp(tmpl.data()) == nullptr) Die("pki dir", Status(Code::kIoError, tmpl));
      world.pki_dir = tmpl;
      const std::vector<PkiIdentity> ids = {{"master", {"127.0.0.1"}}, {"client", {"127.0.0.1"}}};
      if (Status s = WriteClusterPki(world.pki_dir, ids); !s.ok()) Die("pki", s);
    }
    server_tls = LoadTls(world.pki_dir, "master");
    m.client_tls = LoadTls(world.pki_dir, "client");
  } else {
    server_tls.insecure = true;
    m.client_tls.insecure = true;
  }
  m.cluster = kind.Cluster() + std::to_string(++world.starts);
  const std::string& cluster = m.cluster;
  std::string address;
  if (kind.own_process) {
    std::tie(m.pid, address) = SpawnMaster(world, cluster, tls);
  } else {
    auto master =
        MasterServer::Start(MasterOptions(cluster, world.etcd_options, server_tls, m.client_tls));
    if (!master.ok()) Die("master", master.status());
    m.server = std::move(master).value();
    if (Status s = m.server->WaitUntilServing(60 * kNanosPerSecond); !s.ok()) Die("lead", s);
    address = m.server->address();
  }

  if (!kind.own_process) {
    // The node's registration lives where the master does: with a master of its own process, in
    // that process (ServeMaster), so that this one, the client's, holds no etcd watch (a
    // membership watches its own key): a thread blocked in a gRPC wait takes over the polling
    // of the client's calls and adds two context switches to every one.
    m.node = RegisterNode(world.node_etcd.get(), cluster);
  }
  m.stub = pb::StoreMaster::NewStub(MakeChannel(address, m.client_tls));

  // One node reports 1 M objects (the rebuild path fills the master fastest), in parts of
  // kMaxJoinReplicas as a node sends them (one message is bounded: docs/store.md "Message
  // limits"; a single 1 M-replica JoinNode is refused).
  uint64_t accepted = 0;
  for (uint64_t first = 0, part = 0; first < kObjects; first += kMaxJoinReplicas, ++part) {
    const uint64_t last = std::min<uint64_t>(first + kMaxJoinReplicas, kObjects);
    pb::JoinNodeRequest join;
    join.mutable_endpoint()->set_node(1);
    join.mutable_dram()->set_capacity(kObjects * kBlock);
    join.mutable_dram()->set_high_watermark(1.0);
    join.mutable_dram()->set_low_watermark(1.0);
    join.set_member_name(StoreNodeMemberName(NodeId(1)));
    join.set_part(static_cast<uint32_t>(part));
    join.set_more(last < kObjects);
    for (uint64_t i = first; i < last; ++i) {
      const ReportedReplica& rep = world.reports[i];
      pb::ReportedReplica* r = join.add_replicas();
      r->mutable_key()->set_model_fingerprint(rep.key.model_fingerprint);
      r->mutable_key()->set_hash(reinterpret_cast<const char*>(rep.key.hash.bytes.data()), 32);
      r->set_offset(rep.offset);
      r->set_size(rep.size);
      r->set_checksum(rep.checksum);
    }
    grpc::ClientContext ctx;
    pb::JoinNodeResponse jr;
    grpc::Status g = m.stub->JoinNode(&ctx, join, &jr);
    if (!g.ok()) Die("join", Status(Code::kInternal, g.error_message()));
    accepted = jr.accepted();
  }
  if (accepted != kObjects) {
    Die("join", Status(Code::kInternal, "accepted " + std::to_string(accepted)));
  }
  return m;
}

World& TheWorld() {
  static World* w = [] {
    auto* world = new World();
    if (coord::EtcdTestServer::Binary().empty()) {
      Die("etcd", Status(Code::kNotFound, "/usr/bin/etcd is not installed (scripts/setup.sh)"));
    }
    if (Status s = world->etcd.Start(); !s.ok()) Die("etcd start", s);
    world->etcd_options.endpoints = world->etcd.endpoint();
    world->etcd_options.tls.insecure = true;
    auto c = coord::EtcdClient::Connect(world->etcd_options);
    if (!c.ok()) Die("etcd client", c.status());
    world->node_etcd = std::move(c).value();

    world->reports.reserve(kObjects);
    for (uint64_t i = 0; i < kObjects; ++i) {
      world->reports.push_back(ReportedReplica{Key(i), Tier::kDram, i * kBlock, kBlock, i});
    }
    // The in-process baseline rebuilds the same report.
    MasterConfig config;
    config.alignment = kBlock;
    auto local = MasterState::Create(config, SteadyClock::Default());
    if (!local.ok()) Die("local master", local.status());
    world->local = std::move(local).value();
    NodeSpec spec;
    spec.id = NodeId(1);
    spec.dram = TierSpec{kObjects * kBlock, 1.0, 1.0};
    if (Status s = world->local->AddNode(spec); !s.ok()) Die("local node", s);
    auto out = world->local->RebuildFromReports(NodeId(1), world->reports);
    if (!out.ok() || out->accepted != kObjects) Die("local rebuild", out.status());
    g_world = world;
    return world;
  }();
  return *w;
}

// A StoreClient of the master of `tls` sending Exists with `in_flight` calls in flight. One
// client lives at a time (the caller's benchmark owns it): each has a transfer engine whose
// threads take CPU time of their own, which the next benchmark's keys_per_cpu_s would count.
std::unique_ptr<StoreClient> ClientOf(const MasterKind& kind, uint32_t in_flight, bool poll) {
  World& world = TheWorld();
  Master& m = StartMaster(world, kind);
  ClientOptions o;
  o.cluster = m.cluster;
  o.etcd = world.etcd_options;
  o.master_tls = m.client_tls;
  o.local_shm = false;
  o.exists_in_flight = in_flight;
  if (!poll) o.exists_poll = 0;
  auto made = StoreClient::Create(o);
  if (!made.ok()) Die("store client", made.status());
  return std::move(made).value();
}

// Context switches of every thread of this process so far (voluntary and not): a call that hops
// between threads pays one per hop (docs/store.md "Exists over gRPC").
double ProcessSwitches() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_nvcsw + ru.ru_nivcsw);
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The CPU seconds (user + system, all threads, in clock ticks: 10 ms) of a child master so far.
double ChildCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int f = 3; f <= 15 && rest >> field; ++f) {
    if (f >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The context switches of a child master's live threads so far.
double ChildSwitches(pid_t pid) {
  double n = 0;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.starts_with("voluntary_ctxt_switches:") ||
          line.starts_with("nonvoluntary_ctxt_switches:")) {
        n += std::stod(line.substr(line.find(':') + 1));
      }
    }
  }
  return n;
}

// The CPU time and context switches of this process and of the child master (if `child` is one)
// when a benchmark's loop began.
struct Usage {
  explicit Usage(pid_t child = -1) : child(child) {
    if (child > 0) {
      cpu += ChildCpuSeconds(child);
      switches += ChildSwitches(child);
    }
  }
  double Cpu() const { return ProcessCpuSeconds() + (child > 0 ? ChildCpuSeconds(child) : 0.0); }
  double Switches() const { return ProcessSwitches() + (child > 0 ? ChildSwitches(child) : 0.0); }
  pid_t child;
  double cpu = ProcessCpuSeconds();
  double switches = ProcessSwitches();
};

// Sets keys_per_cpu_s (the keys of `iterations` batches over the CPU time since `u` of this
// process and its master's) and switches_per_call (their context switches per batch since `u`).
void CountCpu(benchmark::State& state, const Usage& u) {
  const double cpu = u.Cpu() - u.cpu;
  const double calls = static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.counters["keys_per_cpu_s"] =
      cpu > 0 ? static_cast<double>(state.iterations() * kBatch) / cpu : 0.0;
  state.counters["switches_per_call"] = (u.Switches() - u.switches) / calls;
}

std::vector<std::vector<uint64_t>> Batches(bool hits) {
  std::mt19937_64 rng(hits ? 1 : 2);
  std::vector<std::vector<uint64_t>> out(64);
  for (auto& b : out) {
    for (size_t i = 0; i < kBatch; ++i) {
      const uint64_t id = rng() % kObjects;
      b.push_back(hits ? id : kObjects + id);
    }
  }
  return out;
}

void ExistsRpc(benchmark::State& state) {
  const bool hits = state.range(0) != 0;
  Master& m = StartMaster(TheWorld(), MasterKind{false, state.range(1) != 0});
  std::vector<pb::ExistsRequest> reqs;
  for (const auto& b : Batches(hits)) {
    pb::ExistsRequest& r = reqs.emplace_back();
    r.set_model_fingerprint(kFingerprint);
    std::string packed;
    packed.reserve(b.size() * 32);
    for (uint64_t id : b) {
      const ObjectKey k = Key(id);
      packed.append(reinterpret_cast<const char*>(k.hash.bytes.data()), 32);
    }
    r.set_hashes(std::move(packed));
  }
  size_t i = 0, found = 0;
  const Usage usage0(m.pid);
  for (auto _ : state) {
    grpc::ClientContext ctx;
    pb::ExistsResponse resp;
    grpc::Status g = m.stub->Exists(&ctx, reqs[i++ % reqs.size()], &resp);
    if (!g.ok()) {
      state.SkipWithError(g.error_message().c_str());
      break;
    }
    for (char f : resp.found()) found += f != 0;
  }
  CountCpu(state, usage0);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["found_per_batch"] =
      static_cast<double>(found) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(ExistsRpc)->ArgNames({"hits", "proc"})->ArgsProduct({{1, 0}, {0, 1}})->UseRealTime();

void ExistsClient(benchmark::State& state) {
  const bool hits = state.range(0) != 0;
  const MasterKind kind{state.range(1) != 0, state.range(3) != 0};
  std::unique_ptr<StoreClient> client =
      ClientOf(kind, static_cast<uint32_t>(state.range(2)), state.range(4) != 0);
  std::vector<std::vector<kv::BlockHash>> batches;
  for (const auto& b : Batches(hits)) {
    auto& hashes = batches.emplace_back();
    for (uint64_t id : b) hashes.push_back(Key(id).hash);
  }
  size_t i = 0, found = 0;
  const Usage usage0(TheWorld().masters.at(kind).pid);
  for (auto _ : state) {
    Result<ExistsReply> r = client->Exists(kFingerprint, batches[i++ % batches.size()]);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
    found += static_cast<size_t>(std::count(r->found.begin(), r->found.end(), true));
  }
  CountCpu(state, usage0);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["found_per_batch"] =
      static_cast<double>(found) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(ExistsClient)
    ->ArgNames({"hits", "tls", "in_flight", "proc", "poll"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int64_t proc : {0, 1}) {
        for (int64_t in_flight : {1, 4}) {
          for (int64_t tls : {0, 1}) {
            for (int64_t hits : {1, 0}) {
              for (int64_t poll : {1, 0}) {
                if (poll == 0 && in_flight != 1) continue;  // the baseline of the default only
                b->Args({hits, tls, in_flight, proc, poll});
              }
            }
          }
        }
      }
    })
    ->UseRealTime();

void ExistsLocal(benchmark::State& state) {
  const bool hits = state.range(0) != 0;
  World& w = TheWorld();
  std::vector<std::vector<ObjectKey>> batches;
  for (const auto& b : Batches(hits)) {
    auto& keys = batches.emplace_back();
    for (uint64_t id : b) keys.push_back(Key(id));
  }
  size_t i = 0, found = 0;
  const Usage usage0;
  for (auto _ : state) {
    ExistsResult r = w.local->Exists(batches[i++ % batches.size()]);
    for (uint8_t f : r.found) found += f;
    benchmark::DoNotOptimize(r);
  }
  CountCpu(state, usage0);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["found_per_batch"] =
      static_cast<double>(found) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(ExistsLocal)->ArgName("hits")->Arg(1)->Arg(0)->UseRealTime();

}  // namespace

// The master resigns and etcd stops before the process exits.
void DestroyWorld() {
  if (g_world == nullptr) return;
  for (auto& [kind, m] : g_world->masters) {
    if (m.server != nullptr) m.server->Shutdown();
    if (m.pid > 0) {
      // SIGTERM: it resigns and exits (ServeMaster).
      kill(m.pid, SIGTERM);
      int wstatus = 0;
      waitpid(m.pid, &wstatus, 0);
    }
  }
  if (!g_world->pki_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(g_world->pki_dir, ec);
  }
  delete g_world;
  g_world = nullptr;
}

// `store_rpc_bench --serve-master ETCD CLUSTER PKI_DIR|- FD`: a master of CLUSTER elected through
// the etcd at ETCD (mutual TLS with PKI_DIR's "master" identity, plaintext with -) writes the
// address it serves on to descriptor FD once it leads and store node 1 is registered (the node
// whose report the parent sends), closes it, and serves until SIGTERM.
int ServeMaster(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "store_rpc_bench --serve-master: want ETCD CLUSTER PKI_DIR|- FD\n");
    return 2;
  }
  // Blocked before any thread starts, so that only sigwait below takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  coord::EtcdOptions etcd;
  etcd.endpoints = argv[2];
  etcd.tls.insecure = true;
  const std::string pki = argv[4];
  GrpcTls server_tls, node_tls;
  if (pki == "-") {
    server_tls.insecure = node_tls.insecure = true;
  } else {
    server_tls = LoadTls(pki, "master");
    node_tls = LoadTls(pki, "client");
  }
  auto master = MasterServer::Start(MasterOptions(argv[3], etcd, server_tls, node_tls));
  if (!master.ok()) Die("master", master.status());
  if (Status s = (*master)->WaitUntilServing(60 * kNanosPerSecond); !s.ok()) Die("lead", s);
  auto node_etcd = coord::EtcdClient::Connect(etcd);
  if (!node_etcd.ok()) Die("etcd client", node_etcd.status());
  std::unique_ptr<coord::Membership> node = RegisterNode(node_etcd->get(), argv[3]);
  const int fd = std::atoi(argv[5]);
  const std::string& address = (*master)->address();
  if (write(fd, address.data(), address.size()) != static_cast<ssize_t>(address.size())) {
    Die("master address", Status(Code::kIoError, std::strerror(errno)));
  }
  close(fd);
  int sig = 0;
  sigwait(&stop, &sig);
  (*master)->Shutdown();
  return 0;
}

}  // namespace dualpath::store

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--serve-master") == 0)
    return dualpath::store::ServeMaster(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  dualpath::store::DestroyWorld();
  return 0;
}
