// Scheduler service overhead per request, over gRPC on a Unix socket (in-process server, 1P1D).
// Baseline: an empty-ish RPC (ListEngines) measured in the same process, so scripts report
// ratios. Benchmarks:
//   BM_RpcBaseline          ListEngines round trip
//   BM_Submit/N             Submit of an N-token prompt whose blocks are all stored (hash and
//                           probe every block: the service's per-request storage work)
//   BM_SubmitMiss/N         Submit of an N-token prompt with nothing stored (hash + one probe)
//   BM_Cycle                Submit + PE Fetch (decode and prefill passes) + ReportResult +
//                           WaitResults: the whole control-plane path of one request
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dualpath/control/client.h"
#include "dualpath/control/server.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::control {
namespace {

constexpr const char* kSpec = "layers=2,q_heads=2,kv_heads=2,head_dim=16,vocab=4096";
constexpr uint32_t kBlock = 64;
constexpr uint32_t kMaxPrompt = 16384;

struct Fixture {
  std::string dir;
  std::unique_ptr<ControlServer> server;
  std::unique_ptr<Client> client;
  std::vector<uint32_t> stored;  // a prompt whose blocks are all in the store
  uint64_t next_id = 1;

  Fixture() {
    std::string tmpl = "/var/tmp/dp_control_bench_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
    ServiceOptions o;
    o.model_spec = kSpec;
    o.block_tokens = kBlock;
    o.store_root = dir + "/store";
    o.engines = *ParseEngineList("p0.0:prefill:p0,d0.0:decode:d0");
    // Never declare the bench's engines dead while a benchmark runs without fetching.
    o.heartbeat_s = 3600;
    server = std::move(ControlServer::Start("unix:" + dir + "/sched.sock", o)).value();
    client = std::make_unique<Client>(server->address());
    Register("p0.0", v1::ROLE_PREFILL, "p0");
    Register("d0.0", v1::ROLE_DECODE, "d0");

    stored.resize(kMaxPrompt);
    for (uint32_t i = 0; i < kMaxPrompt; ++i) stored[i] = (i * 7919 + 13) % 4096;
    auto model = *model::RefModelConfig::Parse(kSpec);
    storage::StoreOptions so;
    so.root = dir + "/store";
    so.model_fingerprint = kv::ModelFingerprint(model.Geometry());
    auto store = std::move(storage::BlockStore::Open(so)).value();
    auto hasher = *kv::BlockHasher::Create(kv::HashAlgo::kSha256Cbor, "0", kBlock);
    const kv::BlockShape shape = kv::BlockShape::For(model.Geometry(), kBlock);
    std::vector<std::byte> payload(shape.FullBytes(), std::byte{1});
    for (const kv::BlockHash& h : hasher.HashPrefix(stored)) {
      if (!store->Write(h, shape, payload).ok()) std::abort();
    }
  }
  ~Fixture() {
    server.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  void Register(const std::string& name, v1::Role role, const std::string& node) {
    v1::RegisterEngineRequest req;
    req.mutable_engine()->set_name(name);
    req.mutable_engine()->set_role(role);
    req.mutable_engine()->set_node(node);
    req.mutable_engine()->set_hbm_tokens(int64_t{1} << 40);
    if (!client->RegisterEngine(req).ok()) std::abort();
  }

  v1::SubmitRequest Request(const std::vector<uint32_t>& prompt, size_t n, bool miss) {
    v1::SubmitRequest req;
    v1::RequestSpec* s = req.mutable_request();
    s->set_request_id(next_id++);
    s->mutable_prompt()->Add(prompt.begin(), prompt.begin() + static_cast<long>(n));
    // A different first token: the chain differs from the stored prompt's at block 0.
    if (miss) s->set_prompt(0, (prompt[0] + 1) % 4096);
    s->set_gen_tokens(1);
    return req;
  }
};

// One server for the process (created by the first benchmark, destroyed in main).
std::unique_ptr<Fixture> g_fixture;
Fixture& F() {
  if (g_fixture == nullptr) g_fixture = std::make_unique<Fixture>();
  return *g_fixture;
}

// Reports that reset the scheduler's view (the bench engines never finish work themselves).
void AddIdleReports(v1::FetchRequest* fr) {
  for (uint32_t id = 0; id < 2; ++id) {
    v1::EngineReport* r = fr->add_reports();
    r->set_engine_id(id);
    r->set_hbm_free_tokens(int64_t{1} << 40);
  }
}

void BM_RpcBaseline(benchmark::State& state) {
  Fixture& f = F();
  for (auto _ : state) {
    if (!f.client->ListEngines().ok()) state.SkipWithError("ListEngines");
  }
}
BENCHMARK(BM_RpcBaseline);

void SubmitLoop(benchmark::State& state, bool miss) {
  Fixture& f = F();
  const size_t n = static_cast<size_t>(state.range(0));
  int64_t hits = 0;
  for (auto _ : state) {
    state.PauseTiming();
    v1::SubmitRequest req = f.Request(f.stored, n, miss);
    state.ResumeTiming();
    Result<v1::SubmitReply> reply = f.client->Submit(req);
    if (!reply.ok()) state.SkipWithError("Submit");
    hits = reply.ok() ? reply->hit_tokens() : 0;
  }
  state.counters["hit_tokens"] = static_cast<double>(hits);
}
void BM_Submit(benchmark::State& state) { SubmitLoop(state, false); }
void BM_SubmitMiss(benchmark::State& state) { SubmitLoop(state, true); }
BENCHMARK(BM_Submit)->Arg(1024)->Arg(16384);
BENCHMARK(BM_SubmitMiss)->Arg(1024)->Arg(16384);

void BM_Cycle(benchmark::State& state) {
  Fixture& f = F();
  // Drain what earlier benchmarks submitted, so each cycle schedules exactly its own request.
  for (;;) {
    v1::FetchRequest fr;
    fr.set_group_id(0);
    AddIdleReports(&fr);
    Result<v1::FetchReply> reply = f.client->Fetch(fr);
    if (!reply.ok() || reply->prefill_size() == 0) break;
  }
  uint64_t seq = 0;
  (void)f.client->WaitResults(v1::WaitResultsRequest());
  for (auto _ : state) {
    v1::SubmitRequest req = f.Request(f.stored, 1024, false);
    const uint64_t id = req.request().request_id();
    if (!f.client->Submit(req).ok()) state.SkipWithError("Submit");
    v1::FetchRequest fr;
    fr.set_group_id(0);
    AddIdleReports(&fr);
    fr.set_wait_ms(1000);
    Result<v1::FetchReply> fetched = f.client->Fetch(fr);
    if (!fetched.ok() || fetched->prefill_size() != 1) {
      state.SkipWithError("Fetch");
      break;
    }
    v1::RequestResult r;
    r.set_request_id(id);
    r.set_ok(true);
    r.set_attempt(fetched->prefill(0).attempt());
    if (!f.client->ReportResult(r).ok()) state.SkipWithError("ReportResult");
    v1::WaitResultsRequest wr;
    wr.set_after_seq(seq);
    wr.set_wait_ms(1000);
    Result<v1::WaitResultsReply> results = f.client->WaitResults(wr);
    if (!results.ok() || results->results_size() == 0) {
      state.SkipWithError("WaitResults");
      break;
    }
    seq = results->results(results->results_size() - 1).seq();
  }
}
BENCHMARK(BM_Cycle);

}  // namespace
}  // namespace dualpath::control

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  dualpath::control::g_fixture.reset();
  return 0;
}
