// The store master over gRPC (issue 16, acceptance 3): Exists over 1,000-key batches through a
// real `MasterServer` (a real etcd elects it; one node joined with a report of 1 M objects), and
// the same batches on an in-process MasterState holding the same objects, the same-run baseline.
//
//   ExistsRpc/hits:1|0     one client thread calls StoreMaster.Exists on 127.0.0.1 (packed 32-byte
//                          hashes, as the client library sends them); the master answers on its
//                          gRPC thread
//   ExistsLocal/hits:1|0   MasterState::Exists of the same batches in this thread
// items_per_second is keys/s; bench/store/exists_ratio.sh prints the ratio. Client and master share
// this process (and, on the 2-core development VM, its two cores). keys_per_cpu_s divides the keys
// by the CPU time this whole process spent (client thread, gRPC threads, master): on a machine
// shared with other builds the wall-clock rate measures the load, this one the work.
//
// Needs Debian's etcd (/usr/bin/etcd); exits 2 saying so when it is missing.
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dualpath/common/grpc_channel.h"
#include "dualpath/coord/etcd_test_server.h"
#include "dualpath/coord/membership.h"
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

struct World {
  coord::EtcdTestServer etcd;
  std::unique_ptr<coord::EtcdClient> node_etcd;
  std::unique_ptr<coord::Membership> membership;
  std::unique_ptr<MasterServer> master;
  std::unique_ptr<pb::StoreMaster::Stub> stub;
  std::unique_ptr<MasterState> local;
};

World* g_world = nullptr;

World& TheWorld() {
  static World* w = [] {
    auto* world = new World();
    if (coord::EtcdTestServer::Binary().empty()) {
      Die("etcd", Status(Code::kNotFound, "/usr/bin/etcd is not installed (scripts/setup.sh)"));
    }
    if (Status s = world->etcd.Start(); !s.ok()) Die("etcd start", s);
    coord::EtcdOptions eo;
    eo.endpoints = world->etcd.endpoint();
    eo.tls.insecure = true;
    GrpcTls insecure;
    insecure.insecure = true;

    MasterServerOptions mo;
    mo.cluster = "rpcbench";
    mo.etcd = eo;
    mo.listen = "127.0.0.1:0";
    mo.tls = insecure;
    mo.node_tls = insecure;
    mo.join_grace = 0;
    mo.state.alignment = kBlock;
    auto master = MasterServer::Start(mo);
    if (!master.ok()) Die("master", master.status());
    world->master = std::move(master).value();
    if (Status s = world->master->WaitUntilServing(60 * kNanosPerSecond); !s.ok()) Die("lead", s);

    auto c = coord::EtcdClient::Connect(eo);
    if (!c.ok()) Die("etcd client", c.status());
    world->node_etcd = std::move(c).value();
    coord::MembershipOptions memo;
    memo.cluster = "rpcbench";
    memo.ttl = 60 * kNanosPerSecond;
    auto m = coord::Membership::Create(world->node_etcd.get(), memo);
    if (!m.ok()) Die("membership", m.status());
    world->membership = std::move(m).value();
    if (Status s = world->membership->Register(StoreNodeMemberName(NodeId(1)), "bench",
                                               60 * kNanosPerSecond);
        !s.ok()) {
      Die("register", s);
    }

    grpc::ChannelArguments args = DefaultChannelArgs();
    args.SetMaxSendMessageSize(-1);
    args.SetMaxReceiveMessageSize(-1);
    world->stub = pb::StoreMaster::NewStub(grpc::CreateCustomChannel(
        world->master->address(), grpc::InsecureChannelCredentials(), args));

    // One node reports 1 M objects (the rebuild path fills the master fastest), in parts of
    // kMaxJoinReplicas as a node sends them (one message is bounded: docs/store.md "Message
    // limits"); the in-process baseline rebuilds the same report.
    std::vector<ReportedReplica> reports;
    reports.reserve(kObjects);
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
        const ObjectKey k = Key(i);
        pb::ReportedReplica* r = join.add_replicas();
        r->mutable_key()->set_model_fingerprint(k.model_fingerprint);
        r->mutable_key()->set_hash(reinterpret_cast<const char*>(k.hash.bytes.data()), 32);
        r->set_offset(i * kBlock);
        r->set_size(kBlock);
        r->set_checksum(i);
        reports.push_back(ReportedReplica{k, Tier::kDram, i * kBlock, kBlock, i});
      }
      grpc::ClientContext ctx;
      pb::JoinNodeResponse jr;
      grpc::Status g = world->stub->JoinNode(&ctx, join, &jr);
      if (!g.ok()) Die("join", Status(Code::kInternal, g.error_message()));
      accepted = jr.accepted();
    }
    if (accepted != kObjects) {
      Die("join", Status(Code::kInternal, "accepted " + std::to_string(accepted)));
    }

    MasterConfig config;
    config.alignment = kBlock;
    auto local = MasterState::Create(config, SteadyClock::Default());
    if (!local.ok()) Die("local master", local.status());
    world->local = std::move(local).value();
    NodeSpec spec;
    spec.id = NodeId(1);
    spec.dram = TierSpec{kObjects * kBlock, 1.0, 1.0};
    if (Status s = world->local->AddNode(spec); !s.ok()) Die("local node", s);
    auto out = world->local->RebuildFromReports(NodeId(1), reports);
    if (!out.ok() || out->accepted != kObjects) Die("local rebuild", out.status());
    g_world = world;
    return world;
  }();
  return *w;
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
  World& w = TheWorld();
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
    grpc::Status g = w.stub->Exists(&ctx, reqs[i++ % reqs.size()], &resp);
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
  g_world->master->Shutdown();
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
