// The pool benchmark behind `dualpath bench pool`: in one run and on the same buffers, plain
// memcpy bandwidth against the pool's put and copy-out get bandwidth per block size, zero-copy
// get (pin + pointer + unpin) latency and index lookups per second, in both memory models.
//
// Every figure of a row is measured in the same process; memcpy and get are timed block by block
// in alternating order and reported from the median per-block time, so their ratio is meaningful
// on a shared, noisy machine.
//
// Thread safety: RunPoolBench is single-threaded and creates (and removes) its own regions.
//
// Part of dualpath_benchlib (docs/architecture.md): benchmark code stays out of the production
// libraries; it keeps the namespace of the component it measures (dualpath::pool).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/pool/pool.h"

namespace dualpath::pool {

// Ranges of the options (checked by RunPoolBench, kInvalidArgument outside): data_mib in
// [1, min(kMaxBenchMib, RAM / 4 in MiB)], passes in [1, kMaxBenchPasses].
inline constexpr uint64_t kMaxBenchMib = 16384;
inline constexpr int kMaxBenchPasses = 1000;

struct BenchOptions {
  std::string dir = "/dev/shm";  // where the temporary regions are created
  uint64_t data_mib = 64;        // payload bytes per pass (above the LLC: DRAM bandwidth)
  int passes = 7;                // timed passes per figure (medians reported)
  std::vector<uint64_t> block_bytes = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
  std::vector<MemoryModel> models = {MemoryModel::kCoherent, MemoryModel::kNonCoherent};
  uint64_t lookup_entries = 65536;  // entries in the lookup table
  uint64_t lookups = 2'000'000;
};

struct BenchRow {
  MemoryModel model = MemoryModel::kCoherent;
  uint64_t block_bytes = 0;
  double memcpy_gbps = 0, put_gbps = 0, get_gbps = 0;
  double get_over_memcpy = 0;  // ratio of the median per-block times (interleaved timing)
  double pin_ns = 0;           // zero-copy get: Pin + Unpin of one block
  double lookup_mops = 0;      // per model (the same value on each row of a model)
};

Result<std::vector<BenchRow>> RunPoolBench(const BenchOptions& options);

// {"results":[{"mode":"coherent","block_bytes":N,"memcpy_gbps":x,"put_gbps":x,"get_gbps":x,
//  "lookup_mops":x,"pin_ns":x,"get_over_memcpy":x}, ...]}
std::string BenchJson(const std::vector<BenchRow>& rows);

}  // namespace dualpath::pool
