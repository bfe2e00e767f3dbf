// The store master over gRPC (issue 16, acceptance 3; issue 27, acceptance 3: `exists` >= 3 M
// keys/s over gRPC on one client thread): Exists over 1,000-key batches through a real
// `MasterServer` (a real etcd elects it; one node joined with a report of 1 M objects), and the
// same batches on an in-process MasterState holding the same objects, the same-run baseline.
//
//   ExistsRpc/hits:1|0      one client thread calls StoreMaster.Exists on 127.0.0.1 with the
//                           generated stub, one 1,000-key call at a time, plaintext (the figure
//                           of earlier runs)
//   ExistsClient/hits:1|0/tls:0|1/in_flight:1|4
//                           StoreClient::Exists of 1,000 hashes, what users call: one API call
//                           from one thread, which the library sends as `in_flight` calls of 250
//                           keys in flight together (in_flight 1: one call, the library's earlier
//                           behaviour, the baseline); tls:1 is mutual TLS (what `cluster up/run
//                           --store` uses), tls:0 plaintext (--insecure), each its own master
//   ExistsLocal/hits:1|0    MasterState::Exists of the same batches in this thread
// items_per_second is keys/s; bench/store/exists_ratio.sh prints the ratios. "One client thread":
// every call is issued and its answer awaited by the benchmark's one thread (with calls in flight,
// that thread also polls their completion queue: gRPC adds no client thread for them); the
// master's gRPC handler threads run in this process too, on the machine's other core.
// keys_per_cpu_s divides the keys by the CPU time this whole process spent (client thread, gRPC
// threads, master): on a machine shared with other builds the wall-clock rate measures the load,
// this one the work.
//
// Needs Debian's etcd (/usr/bin/etcd); exits 2 saying so when it is missing.
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/grpc_tls_pki.h"
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
// election of its own), with the stub that joined the node.
struct Master {
  GrpcTls client_tls;
  std::unique_ptr<MasterServer> server;
  std::unique_ptr<pb::StoreMaster::Stub> stub;
};

struct World {
  coord::EtcdTestServer etcd;
  coord::EtcdOptions etcd_options;
  std::string pki_dir;
  std::unique_ptr<coord::EtcdClient> node_etcd;
  std::vector<std::unique_ptr<coord::Membership>> memberships;
  std::map<bool, Master> masters;  // by TLS
  std::vector<ReportedReplica> reports;
  std::unique_ptr<MasterState> local;
};

World* g_world = nullptr;

// The master of `tls`, started, led and joined with the node's report on first use.
Master& StartMaster(World& world, bool tls) {
  auto [it, fresh] = world.masters.try_emplace(tls);
  Master& m = it->second;
  if (!fresh) return m;
  GrpcTls server_tls;
  if (tls) {
    // A CA of this run: one certificate for the master, one for the client (mTLS, as `cluster
    // run --store` issues them).
    std::string tmpl = (std::filesystem::temp_directory_path() / "store_rpc_bench_XXXXXX");
    if (mkdtemp(tmpl.data()) == nullptr) Die("pki dir", Status(Code::kIoError, tmpl));
    world.pki_dir = tmpl;
    const std::vector<PkiIdentity> ids = {{"master", {"127.0.0.1"}}, {"client", {"127.0.0.1"}}};
    if (Status s = WriteClusterPki(world.pki_dir, ids); !s.ok()) Die("pki", s);
    auto load = [&](const std::string& who) {
      GrpcTlsFiles f;
      f.cert = PkiCertPath(world.pki_dir, who);
      f.key = PkiKeyPath(world.pki_dir, who);
      f.ca = PkiCaPath(world.pki_dir);
      auto t = LoadGrpcTls(f);
      if (!t.ok()) Die("tls " + who, t.status());
      return *t;
    };
    server_tls = load("master");
    m.client_tls = load("client");
  } else {
    server_tls.insecure = true;
    m.client_tls.insecure = true;
  }
  const std::string cluster = tls ? "rpcbenchtls" : "rpcbench";
  MasterServerOptions mo;
  mo.cluster = cluster;
  mo.etcd = world.etcd_options;
  mo.listen = "127.0.0.1:0";
  mo.tls = server_tls;
  mo.node_tls = m.client_tls;
  mo.join_grace = 0;
  mo.state.alignment = kBlock;
  auto master = MasterServer::Start(mo);
  if (!master.ok()) Die("master", master.status());
  m.server = std::move(master).value();
  if (Status s = m.server->WaitUntilServing(60 * kNanosPerSecond); !s.ok()) Die("lead", s);

  coord::MembershipOptions memo;
  memo.cluster = cluster;
  memo.ttl = 60 * kNanosPerSecond;
  auto mem = coord::Membership::Create(world.node_etcd.get(), memo);
  if (!mem.ok()) Die("membership", mem.status());
  if (Status s = (*mem)->Register(StoreNodeMemberName(NodeId(1)), "bench", 60 * kNanosPerSecond);
      !s.ok()) {
    Die("register", s);
  }
  world.memberships.push_back(std::move(mem).value());
  m.stub = pb::StoreMaster::NewStub(MakeChannel(m.server->address(), m.client_tls));

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
std::unique_ptr<StoreClient> ClientOf(bool tls, uint32_t in_flight) {
  World& world = TheWorld();
  Master& m = StartMaster(world, tls);
  ClientOptions o;
  o.cluster = tls ? "rpcbenchtls" : "rpcbench";
  o.etcd = world.etcd_options;
  o.master_tls = m.client_tls;
  o.local_shm = false;
  o.exists_in_flight = in_flight;
  auto made = StoreClient::Create(o);
  if (!made.ok()) Die("store client", made.status());
  return std::move(made).value();
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Sets keys_per_cpu_s: the keys of `iterations` batches over the process CPU time since cpu0.
void CountCpu(benchmark::State& state, double cpu0) {
  const double cpu = ProcessCpuSeconds() - cpu0;
  state.counters["keys_per_cpu_s"] =
      cpu > 0 ? static_cast<double>(state.iterations() * kBatch) / cpu : 0.0;
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
  Master& m = StartMaster(TheWorld(), /*tls=*/false);
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
  const double cpu0 = ProcessCpuSeconds();
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
  CountCpu(state, cpu0);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["found_per_batch"] =
      static_cast<double>(found) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(ExistsRpc)->ArgName("hits")->Arg(1)->Arg(0)->UseRealTime();

void ExistsClient(benchmark::State& state) {
  const bool hits = state.range(0) != 0;
  std::unique_ptr<StoreClient> client =
      ClientOf(state.range(1) != 0, static_cast<uint32_t>(state.range(2)));
  std::vector<std::vector<kv::BlockHash>> batches;
  for (const auto& b : Batches(hits)) {
    auto& hashes = batches.emplace_back();
    for (uint64_t id : b) hashes.push_back(Key(id).hash);
  }
  size_t i = 0, found = 0;
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    Result<ExistsReply> r = client->Exists(kFingerprint, batches[i++ % batches.size()]);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
    found += static_cast<size_t>(std::count(r->found.begin(), r->found.end(), true));
  }
  CountCpu(state, cpu0);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["found_per_batch"] =
      static_cast<double>(found) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(ExistsClient)
    ->ArgNames({"hits", "tls", "in_flight"})
    ->ArgsProduct({{1, 0}, {0, 1}, {1, 4}})
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
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    ExistsResult r = w.local->Exists(batches[i++ % batches.size()]);
    for (uint8_t f : r.found) found += f;
    benchmark::DoNotOptimize(r);
  }
  CountCpu(state, cpu0);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["found_per_batch"] =
      static_cast<double>(found) / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(ExistsLocal)->ArgName("hits")->Arg(1)->Arg(0)->UseRealTime();

}  // namespace

// The master resigns and etcd stops before the process exits.
void DestroyWorld() {
  if (g_world == nullptr) return;
  for (auto& [tls, m] : g_world->masters) {
    m.server->Shutdown();
  }
  if (!g_world->pki_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(g_world->pki_dir, ec);
  }
  delete g_world;
  g_world = nullptr;
}

}  // namespace dualpath::store

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  dualpath::store::DestroyWorld();
  return 0;
}
