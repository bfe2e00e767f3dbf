// Block file verification cost: DecodeBlockFile (header checks + XXH3-64 over the payload) and
// EncodeBlockFile against memcpy of the same Full Block, in the same process. Storage calls
// DecodeBlockFile on every read, so its cost should be a small multiple of touching the bytes.
// Payload: one ds660b Full Block of 64 tokens (61 x 64 x 656 B = 2.5 MiB), seeded contents.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "dualpath/kv/block_file.h"

namespace dualpath::kv {
namespace {

struct Block {
  BlockFileMeta meta;
  std::vector<std::byte> payload;
  std::vector<std::byte> file;
  Block() {
    const ModelGeometry m = FindModel("ds660b").value();
    meta.model_fingerprint = ModelFingerprint(m);
    meta.block_hash.bytes.fill(0x42);
    meta.token_count = 64;
    meta.num_layers = m.num_layers;
    meta.bytes_per_token_per_layer = m.kv_bytes_per_token_per_layer;
    payload.resize(meta.PayloadBytes());
    std::mt19937_64 rng(7);
    for (std::byte& b : payload) b = static_cast<std::byte>(rng());
    file.resize(BlockFileSize(payload.size()));
    if (!EncodeBlockFile(meta, payload, file).ok()) std::abort();
  }
};

const Block& TheBlock() {
  static const Block b;
  return b;
}

void Memcpy(benchmark::State& state) {
  const Block& b = TheBlock();
  std::vector<std::byte> dst(b.payload.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), b.payload.data(), b.payload.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * b.payload.size()));
}

void Decode(benchmark::State& state) {
  const Block& b = TheBlock();
  for (auto _ : state) {
    auto d = DecodeBlockFile(b.file, b.meta.model_fingerprint, b.meta.block_hash);
    if (!d.ok()) std::abort();
    benchmark::DoNotOptimize(d->payload.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * b.payload.size()));
}

void Encode(benchmark::State& state) {
  const Block& b = TheBlock();
  std::vector<std::byte> out(b.file.size());
  for (auto _ : state) {
    if (!EncodeBlockFile(b.meta, b.payload, out).ok()) std::abort();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * b.payload.size()));
}

BENCHMARK(Memcpy)->Unit(benchmark::kMicrosecond);
BENCHMARK(Decode)->Unit(benchmark::kMicrosecond);
BENCHMARK(Encode)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dualpath::kv

BENCHMARK_MAIN();
