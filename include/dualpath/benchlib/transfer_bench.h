// The transfer benchmark behind `dualpath bench transfer` (see docs/transfer.md).
//
// A server registers a target region and serves peers until they have all gone; a client
// registers a source region, connects, and keeps `depth` batches of `batch` descriptors of
// `size` bytes in flight for `iters` batches (or `duration`), then reports bandwidth, batch
// latency percentiles and the per-descriptor submission cost.
//
// Thread safety: each call runs its own engine; call from one thread.
//
// Part of dualpath_benchlib (docs/architecture.md): benchmark code stays out of the production
// libraries; it keeps the namespace of the component it measures (dualpath::transfer).
#pragma once

#include <cstdint>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/transfer/engine.h"

namespace dualpath::transfer {

// Input ranges (docs/transfer.md "Input ranges"), checked by ValidateBenchOptions.
inline constexpr uint64_t kMaxBenchSize = 1ull << 30;         // one descriptor: 1 GiB
inline constexpr uint64_t kMaxBenchBatch = 1ull << 20;        // descriptors per batch
inline constexpr uint64_t kMaxBenchDepth = 1024;              // batches in flight
inline constexpr uint64_t kMaxBenchLocalBytes = 1ull << 34;   // client memory: 16 GiB
inline constexpr uint64_t kMaxBenchIters = 100'000'000;       // one latency sample each: 800 MB
inline constexpr double kMaxBenchDurationS = 86'400;          // a day
inline constexpr uint64_t kMaxBenchRegionBytes = 1ull << 36;  // server memory: 64 GiB

struct BenchOptions {
  std::string listen;   // server: ADDR:PORT
  std::string connect;  // client: ADDR:PORT
  uint64_t size = 64 * 1024;
  uint64_t batch = 1;           // descriptors per batch
  uint64_t depth = 4;           // batches in flight
  uint64_t iters = 0;           // batches to run; 0: derived from `bytes`
  uint64_t bytes = 1ull << 30;  // total bytes when iters is 0
  uint64_t warmup = 0;          // batches before measuring; 0: depth * 2
  double duration_s = 0;        // > 0: run for this long instead of `iters`
  TrafficClass cls = TrafficClass::kLow;
  Op op = Op::kPut;
  EngineConfig engine;
  // Buffers from TransferEngine::AllocateRegion (UCX-allocated; mappable by a shared-memory
  // peer, as ucx_perftest allocates them) instead of the caller's own mmap.
  bool ucx_alloc = true;
  // Every descriptor reads and writes the same `size` bytes on both sides (ucx_perftest's memory
  // footprint: cache-resident buffers); otherwise each descriptor has its own memory.
  bool same_buffer = false;
  // Server: region bytes to expose (0: 1 GiB or enough for the client's default use).
  uint64_t region_bytes = 256ull << 20;
  // Server: give up if no peer arrives within this.
  Nanos accept_timeout = 60 * kNanosPerSecond;
};

struct BenchReport {
  std::string op;
  uint64_t size = 0;
  uint64_t batch = 0;
  uint64_t depth = 0;
  uint64_t batches = 0;
  double seconds = 0;
  double gbps = 0;  // payload gigabits per second
  double p50_us = 0;
  double p99_us = 0;
  double descs_per_s = 0;
  double submit_ns_per_desc = 0;  // caller side: validation + queueing (Submit)
  double post_ns_per_desc = 0;    // progress thread: UCX put/get calls, flush included
  double inline_fraction = 0;     // batches Submit posted itself (post_on_submit)
  std::string ToJson() const;
};

// Validates sizes and addresses (InvalidArgument naming the option).
Status ValidateBenchOptions(const BenchOptions& o);
// Serves until every connected peer has gone (or none came within accept_timeout).
// `on_ready` (optional) is called with the bound address once listening.
Status RunBenchServer(const BenchOptions& o,
                      const std::function<void(const std::string&)>& on_ready);
Result<BenchReport> RunBenchClient(const BenchOptions& o);

}  // namespace dualpath::transfer
