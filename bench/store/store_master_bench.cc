// The store master's metadata core (issue 16, acceptance 3): Exists over 1,000-key batches on one
// thread, and the master's memory per million objects.
//
//   ExistsBatch/hits:1        1,000 keys, all committed, drawn at random from 1 M objects
//   ExistsBatch/hits:0        1,000 keys, none present (a cold prefix)
//   HashSetBatch/hits:1|0     the baseline: the same 1,000 finds in a bare std::unordered_set of
//                             the same 1 M keys (no lock, no state check, no result vector)
//   MemoryPerObject/objects:N commits N (1 M, 10 M) objects into a fresh MasterState and reports
//                             the heap growth (glibc mallinfo2: arena + mmapped bytes in use, plus
//                             the arrays the master maps itself for huge pages) and the RSS
//                             growth, per object and per million objects
// items_per_second of the batch benchmarks is keys/s; bench/store/exists_ratio.sh prints them
// with the ratio to the baseline measured in the same run.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_set>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/store/master_state.h"
#include "store/huge_array.h"

namespace dualpath::store {
namespace {

constexpr uint64_t kObjects = 1'000'000;
constexpr size_t kBatch = 1000;
constexpr uint64_t kBlock = 4096;
constexpr uint32_t kNodes = 8;

ObjectKey Key(uint64_t i) {
  // A digest-like hash (the block hash of real keys is SHA-256): splitmix64 of i in every word.
  ObjectKey k;
  k.model_fingerprint = 0xD1A1'0000'0000'0001ULL;
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

std::unique_ptr<MasterState> NewMaster(uint64_t objects = kObjects) {
  MasterConfig config;
  config.alignment = kBlock;
  auto m = MasterState::Create(config, SteadyClock::Default());
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    std::abort();
  }
  std::unique_ptr<MasterState> master = std::move(m).value();
  for (uint32_t n = 1; n <= kNodes; ++n) {
    NodeSpec spec;
    spec.id = NodeId(n);
    // Room for every object without eviction (the master only accounts bytes; nothing is mapped).
    spec.dram = TierSpec{objects * kBlock, 1.0, 1.0};
    if (!master->AddNode(spec).ok()) std::abort();
  }
  return master;
}

void Fill(MasterState& m, uint64_t first, uint64_t count) {
  for (uint64_t i = first; i < first + count; ++i) {
    PutOptions opt;
    opt.preferred_node = NodeId(1 + static_cast<uint32_t>(i % kNodes));
    auto t = m.PutStart(Key(i), kBlock, opt);
    if (!t.ok() || !m.PutCommit(t->id, i).ok()) {
      std::fprintf(stderr, "fill: %s\n", t.status().ToString().c_str());
      std::abort();
    }
  }
}

MasterState& Populated() {
  static std::unique_ptr<MasterState> m = [] {
    auto master = NewMaster();
    Fill(*master, 0, kObjects);
    return master;
  }();
  return *m;
}

// Batches of keys: hits draw from the committed ids, misses from ids never put.
std::vector<std::vector<ObjectKey>> Batches(bool hits) {
  std::mt19937_64 rng(hits ? 1 : 2);
  std::vector<std::vector<ObjectKey>> out(64);
  for (auto& b : out) {
    for (size_t i = 0; i < kBatch; ++i) {
      const uint64_t id = rng() % kObjects;
      b.push_back(Key(hits ? id : kObjects + id));
    }
  }
  return out;
}

void ExistsBatch(benchmark::State& state) {
  const bool hits = state.range(0) != 0;
  MasterState& m = Populated();
  const auto batches = Batches(hits);
  size_t i = 0, found = 0;
  for (auto _ : state) {
    ExistsResult r = m.Exists(batches[i++ % batches.size()]);
    found += r.prefix_hits;
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["prefix_hits_per_batch"] =
      static_cast<double>(found) / static_cast<double>(state.iterations());
}
BENCHMARK(ExistsBatch)->ArgName("hits")->Arg(1)->Arg(0);

void HashSetBatch(benchmark::State& state) {
  const bool hits = state.range(0) != 0;
  static const std::unordered_set<ObjectKey> set = [] {
    std::unordered_set<ObjectKey> s;
    s.reserve(kObjects);
    for (uint64_t i = 0; i < kObjects; ++i) s.insert(Key(i));
    return s;
  }();
  const auto batches = Batches(hits);
  size_t i = 0;
  for (auto _ : state) {
    size_t n = 0;
    for (const ObjectKey& k : batches[i++ % batches.size()]) n += set.contains(k) ? 1 : 0;
    benchmark::DoNotOptimize(n);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}
BENCHMARK(HashSetBatch)->ArgName("hits")->Arg(1)->Arg(0);

// The master's memory: glibc's heap in use (arena + its own mmapped blocks) and the arrays the
// master maps itself for huge pages (huge_array.h), which mallinfo2 does not see.
size_t HeapInUse() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd + HugeArrayMappedBytes();
}

size_t RssBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Commits state.range(0) objects into a fresh MasterState (nodes sized to hold them all).
void MemoryPerObject(benchmark::State& state) {
  const uint64_t objects = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {
    malloc_trim(0);
    const size_t heap0 = HeapInUse();
    const size_t rss0 = RssBytes();
    auto m = NewMaster(objects);
    Fill(*m, 0, objects);
    const size_t heap1 = HeapInUse();
    const size_t rss1 = RssBytes();
    const double per_object = static_cast<double>(heap1 - heap0) / static_cast<double>(objects);
    state.counters["heap_bytes_per_object"] = per_object;
    state.counters["heap_MiB_per_million"] = per_object * 1e6 / (1 << 20);
    state.counters["rss_bytes_per_object"] =
        static_cast<double>(rss1 > rss0 ? rss1 - rss0 : 0) / static_cast<double>(objects);
    state.counters["rss_MiB_per_million"] = static_cast<double>(rss1 > rss0 ? rss1 - rss0 : 0) /
                                            static_cast<double>(objects) * 1e6 / (1 << 20);
    state.counters["objects"] = static_cast<double>(m->Stats().objects);
  }
}
// 1 M (the figure docs/store.md has carried since issue 16) and 10 M (issue 27's acceptance).
BENCHMARK(MemoryPerObject)
    ->ArgName("objects")
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dualpath::store

BENCHMARK_MAIN();
