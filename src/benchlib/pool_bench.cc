#include "dualpath/benchlib/pool_bench.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>

#include "dualpath/common/numeric.h"

namespace dualpath::pool {
namespace {

using SteadyTime = std::chrono::steady_clock;

double Seconds(SteadyTime::time_point a, SteadyTime::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

BlockHash Key(uint64_t i) {
  BlockHash h;
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 12345;
  for (int w = 0; w < 4; ++w) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    std::memcpy(h.bytes.data() + 8 * w, &x, 8);
  }
  return h;
}

// A temporary region removed on destruction, also when Make fails half way. Everything in the
// directory was made by this object (mkdtemp gives a fresh, uniquely named directory; the region
// and, for the non-coherent model, its node-local lock files go in it), so removing the directory
// removes exactly what this run made.
class TempRegion {
 public:
  static Result<std::unique_ptr<TempRegion>> Make(const std::string& dir, Geometry g) {
    std::string tmpl = dir + "/dpbench-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("mkdtemp in " + dir, errno);
    std::unique_ptr<TempRegion> t(new TempRegion());
    t->dir_ = tmpl;
    // The region is reserved at creation: a --dir that cannot hold it is kStorageNoSpace here.
    RETURN_IF_ERROR(Pool::Create(t->dir_ + "/region", g));
    OpenOptions o;
    o.local_dir = t->dir_;
    ASSIGN_OR_RETURN(t->pool_, Pool::Open(t->dir_ + "/region", o));
    return t;
  }
  ~TempRegion() {
    pool_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Pool& pool() { return *pool_; }

 private:
  TempRegion() = default;
  std::string dir_;
  std::unique_ptr<Pool> pool_;
};

Result<double> LookupMops(const BenchOptions& o, MemoryModel model) {
  Geometry g;
  g.model = model;
  g.chunk_bytes = 64 << 10;  // 1 KiB slots
  const uint64_t chunks = (o.lookup_entries + 63) / 64 + 1;
  g.index_capacity = std::bit_ceil(2 * o.lookup_entries);
  g.region_bytes = RegionBytesFor(g, chunks);
  ASSIGN_OR_RETURN(auto region, TempRegion::Make(o.dir, g));
  std::vector<std::byte> payload(1024, std::byte{7});
  for (uint64_t i = 0; i < o.lookup_entries; ++i) {
    RETURN_IF_ERROR(region->pool().Put(Key(i), payload));
  }
  // Random order over present keys, precomputed so the loop measures only the lookups.
  std::vector<BlockHash> queries(std::min<uint64_t>(o.lookups, 1 << 20));
  std::mt19937_64 rng(1);
  for (auto& q : queries) q = Key(rng() % o.lookup_entries);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    uint64_t found = 0;
    const auto t0 = SteadyTime::now();
    for (uint64_t i = 0; i < o.lookups; ++i)
      found += region->pool().Contains(queries[i % queries.size()]);
    const double s = Seconds(t0, SteadyTime::now());
    if (found != o.lookups) return Internal("bench: a present key was not found");
    best = std::max(best, static_cast<double>(o.lookups) / s / 1e6);
  }
  return best;
}

Result<BenchRow> MeasureSize(const BenchOptions& o, MemoryModel model, uint64_t block,
                             std::vector<std::byte>& src, std::vector<std::byte>& dst) {
  const uint64_t n = std::max<uint64_t>(1, (o.data_mib << 20) / block);
  const uint64_t bytes = n * block;
  Geometry g;
  g.model = model;
  g.chunk_bytes = 4 << 20;
  const uint64_t per_chunk = std::max<uint64_t>(1, g.chunk_bytes / block);
  const uint64_t chunks = block > g.chunk_bytes ? n * ((block + g.chunk_bytes - 1) / g.chunk_bytes)
                                                : (n + per_chunk - 1) / per_chunk;
  g.index_capacity = std::bit_ceil(std::max<uint64_t>(1024, 2 * n));
  g.region_bytes = RegionBytesFor(g, chunks);
  ASSIGN_OR_RETURN(auto region, TempRegion::Make(o.dir, g));
  Pool& pool = region->pool();
  BenchRow row;
  row.model = model;
  row.block_bytes = block;
  // Per-block copy times of every pass; medians over them are immune to the preemptions of a
  // shared machine (one preempted copy would dominate a sum).
  std::vector<double> put_bw, get_t, memcpy_t;
  for (int pass = 0; pass < o.passes; ++pass) {
    // put: from the source buffer into freshly allocated blocks.
    for (uint64_t i = 0; i < n && pass > 0; ++i) RETURN_IF_ERROR(pool.Delete(Key(i)));
    auto t0 = SteadyTime::now();
    for (uint64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(pool.Put(Key(i), std::span(src.data() + i * block, block)));
    }
    put_bw.push_back(static_cast<double>(bytes) / Seconds(t0, SteadyTime::now()));
    // memcpy baseline and copy-out get: the same pool blocks into the same destination, timed
    // block by block in alternating order, so that a burst of noise from other processes on the
    // machine lands on both figures alike.
    std::vector<const std::byte*> ptrs(n);
    for (uint64_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(PinnedBlock b, pool.Pin(Key(i)));
      ptrs[i] = b.data;
      RETURN_IF_ERROR(pool.Unpin(b));
    }
    for (uint64_t i = 0; i < n; ++i) {
      std::byte* out = dst.data() + i * block;
      for (int k = 0; k < 2; ++k) {
        const bool do_get = (k == 0) == (i % 2 == 0);
        const auto a = SteadyTime::now();
        if (do_get) {
          ASSIGN_OR_RETURN(uint64_t got, pool.Get(Key(i), std::span(out, block)));
          if (got != block) return Internal("bench: short get");
        } else {
          std::memcpy(out, ptrs[i], block);
        }
        (do_get ? get_t : memcpy_t).push_back(Seconds(a, SteadyTime::now()));
      }
    }
  }
  if (std::memcmp(dst.data(), src.data(), bytes) != 0) {
    return Internal("bench: get returned different bytes than put");
  }
  // Medians over passes: robust to bursts of noise from other processes in either direction.
  row.put_gbps = Median(put_bw) / 1e9;
  const double get_med = Median(get_t), memcpy_med = Median(memcpy_t);
  row.get_gbps = static_cast<double>(block) / get_med / 1e9;
  row.memcpy_gbps = static_cast<double>(block) / memcpy_med / 1e9;
  row.get_over_memcpy = memcpy_med / get_med;
  // Zero-copy get: pin + pointer + unpin of one block.
  constexpr int kPins = 20000;
  const auto t0 = SteadyTime::now();
  for (int i = 0; i < kPins; ++i) {
    ASSIGN_OR_RETURN(PinnedBlock b, pool.Pin(Key(static_cast<uint64_t>(i) % n)));
    RETURN_IF_ERROR(pool.Unpin(b));
  }
  row.pin_ns = Seconds(t0, SteadyTime::now()) * 1e9 / kPins;
  return row;
}

}  // namespace

Result<std::vector<BenchRow>> RunPoolBench(const BenchOptions& o) {
  if (o.passes <= 0 || o.data_mib == 0 || o.lookup_entries == 0 || o.lookups == 0) {
    return InvalidArgument("bench pool: passes, data size and lookup counts must be positive");
  }
  RETURN_IF_ERROR(
      CheckCountRange("--passes", static_cast<uint64_t>(o.passes), 1, kMaxBenchPasses, ""));
  // Two buffers of --mib plus a region of about --mib in shared memory: all of it must fit in
  // RAM at once, or the pages would be swapped while timed (or the allocation fail).
  const uint64_t phys_bytes =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t phys_mib = phys_bytes >> 20;
  const uint64_t max_mib = std::min<uint64_t>(kMaxBenchMib, std::max<uint64_t>(1, phys_mib / 4));
  if (o.data_mib > max_mib) {
    return InvalidArgument("--mib " + std::to_string(o.data_mib) + " is outside [1, " +
                           std::to_string(max_mib) + "] (at most " + std::to_string(kMaxBenchMib) +
                           " and a quarter of this host's RAM)");
  }
  uint64_t max_block = 0;
  for (uint64_t b : o.block_bytes) max_block = std::max(max_block, b);
  const uint64_t buf_bytes = std::max(o.data_mib << 20, max_block);
  std::vector<std::byte> src, dst;
  try {
    src.resize(buf_bytes);
    dst.resize(buf_bytes);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("bench pool: cannot allocate 2 x " + std::to_string(buf_bytes) +
                             " bytes for --mib " + std::to_string(o.data_mib));
  }
  std::mt19937_64 rng(7);
  for (size_t i = 0; i + 8 <= src.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(src.data() + i, &v, 8);
  }
  std::memset(dst.data(), 1, dst.size());  // fault the pages in before timing
  std::vector<BenchRow> rows;
  for (MemoryModel m : o.models) {
    ASSIGN_OR_RETURN(double mops, LookupMops(o, m));
    for (uint64_t b : o.block_bytes) {
      ASSIGN_OR_RETURN(BenchRow row, MeasureSize(o, m, b, src, dst));
      row.lookup_mops = mops;
      rows.push_back(row);
    }
  }
  return rows;
}

std::string BenchJson(const std::vector<BenchRow>& rows) {
  std::string s = "{\"results\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    s += fmt::format(
        "{}{{\"mode\":\"{}\",\"block_bytes\":{},\"memcpy_gbps\":{:.3f},\"put_gbps\":{:.3f},"
        "\"get_gbps\":{:.3f},\"lookup_mops\":{:.3f},\"pin_ns\":{:.1f},"
        "\"get_over_memcpy\":{:.3f}}}",
        i ? "," : "", MemoryModelName(r.model), r.block_bytes, r.memcpy_gbps, r.put_gbps,
        r.get_gbps, r.lookup_mops, r.pin_ns, r.get_over_memcpy);
  }
  return s + "]}";
}

}  // namespace dualpath::pool
