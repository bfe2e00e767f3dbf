// The store client's remote get (issue 16, acceptance 3: a remote get of 1 MiB objects at >= 0.9x
// the link's goodput) against the same bytes moved by bare transfer-engine gets, in one run.
//
//   StoreGet/batch:N        StoreClient::GetInto of N 1 MiB objects into a registered buffer
//                           (zero-copy): Get (pins) + one transfer batch + checksums + Unpin
//   StoreGetStaged/batch:N  the same into unregistered memory (staging buffer + memcpy)
//   RawGet/batch:N          one TransferEngine get batch of the same N ranges of the node's tier,
//                           the same-run baseline (what the link and UCX alone give)
//   MasterRoundTrip         StoreClient::Exists of one key: one master RPC, the fixed cost a get
//                           pays twice (Get, Unpin)
// bytes_per_second is object bytes; bench/store_node/get_ratio.sh prints StoreGet / RawGet.
// A real etcd, a real elected MasterServer and a StoreNode run in this process with the client;
// UCX_TLS is tcp unless DUALPATH_BENCH_UCX_TLS says otherwise (127.0.0.1, not a 2 Gbit/s link: on
// the testbed the same binary measures the compute link).
//
// Needs Debian's etcd (/usr/bin/etcd); exits 2 saying so when it is missing.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dualpath/coord/etcd_test_server.h"
#include "dualpath/store/client.h"
#include "dualpath/store/master_server.h"
#include "dualpath/store/node.h"
#include "dualpath/transfer/engine.h"

namespace dualpath::store {
namespace {

constexpr uint64_t kObject = 1 << 20;
constexpr uint32_t kObjects = 32;

ObjectKey Key(uint32_t i) {
  ObjectKey k;
  k.model_fingerprint = 0xbe0c;
  k.hash.bytes[0] = static_cast<uint8_t>(i);
  k.hash.bytes[1] = static_cast<uint8_t>(i >> 8);
  k.hash.bytes[31] = 0x5a;
  return k;
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "store_get_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(s.code() == Code::kNotFound ? 2 : 1);
}

std::string UcxTls() {
  const char* env = std::getenv("DUALPATH_BENCH_UCX_TLS");
  return env != nullptr ? env : "tcp";
}

struct World {
  coord::EtcdTestServer etcd;
  std::string shm_dir;
  std::unique_ptr<MasterServer> master;
  std::unique_ptr<StoreNode> node;
  std::unique_ptr<StoreClient> client;
  std::vector<std::byte> dest;    // registered with the client
  std::vector<std::byte> staged;  // not registered
  // The baseline: a bare engine connected to the node.
  std::unique_ptr<transfer::TransferEngine> raw;
  transfer::PeerId raw_peer;
  uint64_t remote_base = 0;
  std::vector<std::byte> raw_dest;
  std::vector<uint64_t> offsets;  // per object, in the node's tier
};

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
    char tmpl[] = "/tmp/dualpath-store-get-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp", IoError("mkdtemp", errno));
    world->shm_dir = tmpl;
    // The world lives until exit (the benchmarks share it); its tier file's directory goes then.
    static std::string dir_to_remove = world->shm_dir;
    std::atexit([] { std::filesystem::remove_all(dir_to_remove); });

    MasterServerOptions mo;
    mo.cluster = "getbench";
    mo.etcd = eo;
    mo.listen = "127.0.0.1:0";
    mo.tls = insecure;
    mo.node_tls = insecure;
    auto master = MasterServer::Start(mo);
    if (!master.ok()) Die("master", master.status());
    world->master = std::move(master).value();
    if (Status s = world->master->WaitUntilServing(60 * kNanosPerSecond); !s.ok()) Die("lead", s);

    NodeOptions no;
    no.cluster = "getbench";
    no.etcd = eo;
    no.id = NodeId(1);
    no.host = "bench-node";
    no.dram_bytes = 2 * kObjects * kObject;
    no.shm_dir = world->shm_dir;
    no.transfer.ucx_tls = UcxTls();
    no.rpc_tls = insecure;
    no.master_tls = insecure;
    auto node = StoreNode::Start(no);
    if (!node.ok()) Die("node", node.status());
    world->node = std::move(node).value();
    while (!world->master->Stats() || world->master->Stats()->nodes < 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // set-up, not measured
    }

    ClientOptions co;
    co.cluster = "getbench";
    co.etcd = eo;
    co.master_tls = insecure;
    co.host = "bench-client";  // never the node's host: every byte crosses the transfer engine
    co.transfer.ucx_tls = UcxTls();
    auto client = StoreClient::Create(co);
    if (!client.ok()) Die("client", client.status());
    world->client = std::move(client).value();
    world->dest.resize(kObjects * kObject);
    world->staged.resize(kObjects * kObject);
    if (Status s = world->client->RegisterBuffer(world->dest.data(), world->dest.size()); !s.ok()) {
      Die("register", s);
    }
    std::mt19937_64 rng(7);
    std::vector<std::byte> bytes(kObjects * kObject);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    std::vector<PutItem> items;
    for (uint32_t i = 0; i < kObjects; ++i) {
      items.push_back(PutItem{Key(i), std::span(bytes).subspan(i * kObject, kObject)});
    }
    auto put = world->client->Put(items);
    if (!put.ok()) Die("put", put.status());
    for (const Status& s : *put) {
      if (!s.ok()) Die("put item", s);
    }

    // The baseline reads the same ranges of the node's tier.
    for (uint32_t i = 0; i < kObjects; ++i) {
      for (const NodeReplica& r : world->node->Replicas()) {
        if (r.key == Key(i)) world->offsets.push_back(r.offset);
      }
    }
    if (world->offsets.size() != kObjects) Die("offsets", Internal("replicas not recorded"));
    transfer::EngineConfig ec;
    ec.ucx_tls = UcxTls();
    auto raw = transfer::TransferEngine::Create(ec);
    if (!raw.ok()) Die("raw engine", raw.status());
    world->raw = std::move(raw).value();
    world->raw_dest.resize(kObjects * kObject);
    if (auto r = world->raw->RegisterRegion(world->raw_dest.data(), world->raw_dest.size());
        !r.ok()) {
      Die("raw register", r.status());
    }
    auto peer = world->raw->Connect(world->node->address().transfer_addr);
    if (!peer.ok()) Die("raw connect", peer.status());
    world->raw_peer = *peer;
    auto regions = world->raw->RemoteRegions(*peer);
    if (!regions.ok() || regions->empty()) Die("raw regions", regions.status());
    world->remote_base = (*regions)[0].addr;
    return world;
  }();
  return *w;
}

void StoreGet(benchmark::State& state, bool registered) {
  World& w = TheWorld();
  const auto n = static_cast<uint32_t>(state.range(0));
  std::vector<std::byte>& buf = registered ? w.dest : w.staged;
  uint32_t next = 0;
  for (auto _ : state) {
    std::vector<GetItem> items;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t obj = (next + i) % kObjects;
      items.push_back(GetItem{Key(obj), std::span(buf).subspan(i * kObject, kObject)});
    }
    next += n;
    auto got = w.client->GetInto(items);
    if (!got.ok()) {
      state.SkipWithError(got.status().ToString().c_str());
      break;
    }
    for (const ReadResult& r : *got) {
      if (!r.status.ok() || r.source != ReadSource::kRemote) {
        state.SkipWithError(("miss: " + r.status.ToString()).c_str());
        break;
      }
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * kObject));
}

void StoreGetZeroCopy(benchmark::State& state) { StoreGet(state, true); }
void StoreGetStaged(benchmark::State& state) { StoreGet(state, false); }

void RawGet(benchmark::State& state) {
  World& w = TheWorld();
  const auto n = static_cast<uint32_t>(state.range(0));
  uint32_t next = 0;
  for (auto _ : state) {
    transfer::Batch b{
        .peer = w.raw_peer, .cls = transfer::TrafficClass::kLow, .op = transfer::Op::kGet};
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t obj = (next + i) % kObjects;
      b.descs.push_back({reinterpret_cast<uint64_t>(w.raw_dest.data() + i * kObject),
                         w.remote_base + w.offsets[obj], kObject});
    }
    next += n;
    std::promise<Status> done;
    b.on_complete = [&done](const Status& s) { done.set_value(s); };
    Status s = w.raw->Submit(std::move(b));
    if (s.ok()) s = done.get_future().get();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * kObject));
}

// One master round trip (Exists of one key): the fixed cost a get adds twice (Get and Unpin).
void MasterRoundTrip(benchmark::State& state) {
  World& w = TheWorld();
  std::vector<kv::BlockHash> hashes = {Key(0).hash};
  for (auto _ : state) {
    auto r = w.client->Exists(Key(0).model_fingerprint, hashes);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
  }
}

BENCHMARK(MasterRoundTrip)->UseRealTime();
BENCHMARK(StoreGetZeroCopy)->Name("StoreGet")->ArgName("batch")->Arg(1)->Arg(16)->UseRealTime();
BENCHMARK(StoreGetStaged)->ArgName("batch")->Arg(16)->UseRealTime();
BENCHMARK(RawGet)->ArgName("batch")->Arg(1)->Arg(16)->UseRealTime();

}  // namespace
}  // namespace dualpath::store

BENCHMARK_MAIN();
