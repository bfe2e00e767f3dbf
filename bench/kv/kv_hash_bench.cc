// Block hashing throughput against raw SHA-256 over the same bytes, in the same process.
//
// For each block size and token distribution the benchmarks process one token sequence:
//   Sha256Raw        one SHA-256 stream over a contiguous buffer as long as all the CBOR
//                    messages the chain hashes (the cost floor: no framing, one finalization)
//   Sha256PerBlock   SHA-256 of each pre-encoded CBOR message (one digest per block, framing
//                    already done: isolates the per-block digest init/final cost)
//   Sha256TokenBytes one SHA-256 stream over the raw u32 token ids (4 bytes per token)
//   HashSha256Cbor   BlockHasher sha256_cbor (vLLM-compatible): encode + digest per block, on the
//                    path the CPU selects (SHA-NI where available)
//   HashSha256CborOpenSsl  the same, forced onto the OpenSSL fallback path (the pre-SHA-NI code)
//   HashXxh3         BlockHasher xxh3 (internal mode)
// All report bytes_per_second over the CBOR message bytes (TokenBytes: over its own 4 B/token),
// so bench/kv/hash_ratio.sh can print throughput ratios. Tokens come from a seeded RNG.
#include <benchmark/benchmark.h>
#include <openssl/evp.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dualpath/kv/cbor.h"
#include "dualpath/kv/hasher.h"
#include "kv/sha256.h"

namespace dualpath::kv {
namespace {

constexpr size_t kTokens = 1 << 16;

// dist 0: real vocabulary ids (< 151,936: 3- or 5-byte CBOR); dist 1: uniform in [0, 2^31-1].
const std::vector<TokenId>& Tokens(int dist) {
  static const std::vector<TokenId> vocab = [] {
    std::mt19937_64 rng(2026);
    std::vector<TokenId> t(kTokens);
    for (TokenId& x : t) x = static_cast<TokenId>(rng() % 151936);
    return t;
  }();
  static const std::vector<TokenId> full = [] {
    std::mt19937_64 rng(2027);
    std::vector<TokenId> t(kTokens);
    for (TokenId& x : t) x = static_cast<TokenId>(rng() % (uint64_t{kMaxTokenId} + 1));
    return t;
  }();
  return dist == 0 ? vocab : full;
}

// The CBOR messages vLLM's chain hashes for these tokens (parent bytes are a placeholder: only
// sizes matter for the baselines).
std::vector<std::string> Messages(int dist, uint32_t block_size) {
  const std::vector<TokenId>& t = Tokens(dist);
  std::vector<std::string> out;
  for (size_t b = 0; b + block_size <= t.size(); b += block_size) {
    std::string m;
    cbor::AppendArrayHead(3, &m);
    cbor::AppendBytes(std::string(32, 'p'), &m);
    cbor::AppendArrayHead(block_size, &m);
    for (size_t i = b; i < b + block_size; ++i) cbor::AppendUnsigned(t[i], &m);
    cbor::AppendNull(&m);
    out.push_back(std::move(m));
  }
  return out;
}

size_t TotalBytes(const std::vector<std::string>& msgs) {
  size_t n = 0;
  for (const std::string& m : msgs) n += m.size();
  return n;
}

const EVP_MD* Md() {
  static const EVP_MD* md = EVP_MD_fetch(nullptr, "SHA2-256", nullptr);
  return md;
}

void Sha256Raw(benchmark::State& state) {
  const auto msgs =
      Messages(static_cast<int>(state.range(1)), static_cast<uint32_t>(state.range(0)));
  const std::string buf(TotalBytes(msgs), 'x');
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned char out[32];
  for (auto _ : state) {
    EVP_DigestInit_ex2(ctx, Md(), nullptr);
    EVP_DigestUpdate(ctx, buf.data(), buf.size());
    EVP_DigestFinal_ex(ctx, out, nullptr);
    benchmark::DoNotOptimize(out);
  }
  EVP_MD_CTX_free(ctx);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size()));
}

void Sha256PerBlock(benchmark::State& state) {
  const auto msgs =
      Messages(static_cast<int>(state.range(1)), static_cast<uint32_t>(state.range(0)));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned char out[32];
  for (auto _ : state) {
    for (const std::string& m : msgs) {
      EVP_DigestInit_ex2(ctx, Md(), nullptr);
      EVP_DigestUpdate(ctx, m.data(), m.size());
      EVP_DigestFinal_ex(ctx, out, nullptr);
      benchmark::DoNotOptimize(out);
    }
  }
  EVP_MD_CTX_free(ctx);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * TotalBytes(msgs)));
}

void Sha256TokenBytes(benchmark::State& state) {
  const std::vector<TokenId>& t = Tokens(static_cast<int>(state.range(1)));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned char out[32];
  for (auto _ : state) {
    EVP_DigestInit_ex2(ctx, Md(), nullptr);
    EVP_DigestUpdate(ctx, t.data(), t.size() * sizeof(TokenId));
    EVP_DigestFinal_ex(ctx, out, nullptr);
    benchmark::DoNotOptimize(out);
  }
  EVP_MD_CTX_free(ctx);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size() * sizeof(TokenId)));
}

void HashWith(benchmark::State& state, HashAlgo algo) {
  const int dist = static_cast<int>(state.range(1));
  const uint32_t bs = static_cast<uint32_t>(state.range(0));
  const size_t bytes = TotalBytes(Messages(dist, bs));
  const BlockHasher h = BlockHasher::Create(algo, "0", bs).value();
  const std::vector<TokenId>& t = Tokens(dist);
  std::vector<BlockHash> out;
  out.reserve(t.size() / bs);
  for (auto _ : state) {
    out.clear();
    h.HashBlocks(t, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * t.size()), benchmark::Counter::kIsRate);
}

void HashSha256Cbor(benchmark::State& state) { HashWith(state, HashAlgo::kSha256Cbor); }
void HashSha256CborOpenSsl(benchmark::State& state) {
  sha256::ForceImpl(sha256::Impl::kOpenSsl);
  HashWith(state, HashAlgo::kSha256Cbor);
  sha256::ResetImpl();
}
void HashXxh3(benchmark::State& state) { HashWith(state, HashAlgo::kXxh3); }

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"block", "dist"});
  for (int dist : {0, 1}) {
    for (int bs : {16, 64, 256, 512}) b->Args({bs, dist});
  }
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(Sha256Raw)->Apply(Args);
BENCHMARK(Sha256PerBlock)->Apply(Args);
BENCHMARK(Sha256TokenBytes)->Apply(Args);
BENCHMARK(HashSha256Cbor)->Apply(Args);
BENCHMARK(HashSha256CborOpenSsl)->Apply(Args);
BENCHMARK(HashXxh3)->Apply(Args);

}  // namespace
}  // namespace dualpath::kv

BENCHMARK_MAIN();
