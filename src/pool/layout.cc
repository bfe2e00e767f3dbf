#include "pool/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace dualpath::pool::internal {
// Slots a chunk is carved into at most (one 64-bit bitmap per chunk descriptor).
constexpr uint64_t kMaxSlotsPerChunk = 64;
// Data area alignment: a huge page, so hugetlbfs/DAX mappings keep payloads huge-page aligned.
constexpr uint64_t kDataAlign = 2ull << 20;

Layout LayoutFor(const Geometry& g, uint64_t chunks, uint64_t index_capacity) {
  Layout l{};
  uint64_t off = kHeaderBytes;
  l.procs_off = off;
  off += AlignUp(uint64_t{g.max_procs} * sizeof(ProcSlot), kCacheLine);
  l.pins_off = off;
  off += AlignUp(uint64_t{g.max_procs} * g.pin_records * sizeof(PinRecord), kCacheLine);
  l.bitmap_off = off;
  off += AlignUp((chunks + 63) / 64 * 8, kCacheLine);
  l.chunks_off = off;
  off += AlignUp(chunks * sizeof(ChunkDesc), kCacheLine);
  l.index_off = off;
  off += index_capacity * sizeof(IndexEntry);
  l.roots_off = off;
  off += uint64_t{g.max_roots} * sizeof(RootEntry);
  l.locks_off = off;
  off += kMutexAreaBytes + LockAreaBytes(g.num_nodes);
  l.data_off = AlignUp(off, std::min<uint64_t>(kDataAlign, g.chunk_bytes));
  l.num_chunks = chunks;
  l.index_capacity = index_capacity;
  return l;
}

Result<Layout> ComputeLayout(const Geometry& g) {
  if (g.chunk_bytes < 4096 || !std::has_single_bit(g.chunk_bytes)) {
    return InvalidArgument(
        fmt::format("chunk_bytes={} must be a power of two >= 4096", g.chunk_bytes));
  }
  if (g.max_procs == 0 || g.max_procs > 4096) {
    return InvalidArgument(fmt::format("max_procs={} must be in [1, 4096]", g.max_procs));
  }
  if (g.pin_records == 0 || !std::has_single_bit(g.pin_records)) {
    return InvalidArgument(fmt::format("pin_records={} must be a power of two", g.pin_records));
  }
  if (g.num_nodes == 0 || g.num_nodes > 1024) {
    return InvalidArgument(fmt::format("num_nodes={} must be in [1, 1024]", g.num_nodes));
  }
  if (g.max_roots == 0 || g.max_roots > 65536) {
    return InvalidArgument(fmt::format("max_roots={} must be in [1, 65536]", g.max_roots));
  }
  if (g.index_capacity != 0 && !std::has_single_bit(g.index_capacity)) {
    return InvalidArgument(
        fmt::format("index_capacity={} must be a power of two", g.index_capacity));
  }
  if (g.lease <= 0) {
    return InvalidArgument("lease must be positive");
  }
  if (g.model != MemoryModel::kCoherent && g.model != MemoryModel::kNonCoherent) {
    return InvalidArgument("unknown memory model");
  }
  // The metadata size depends on the chunk count and vice versa: start from the upper bound and
  // shrink until metadata + data fit.
  uint64_t chunks = g.region_bytes / g.chunk_bytes;
  while (chunks > 0) {
    uint64_t cap = g.index_capacity;
    if (cap == 0) {
      cap = NextPow2(std::max<uint64_t>(1024, 2 * chunks * kMaxSlotsPerChunk));
    }
    Layout l = LayoutFor(g, chunks, cap);
    if (l.data_off + chunks * g.chunk_bytes <= g.region_bytes) {
      return l;
    }
    // Step by the overflow (in chunks) to converge quickly on large regions.
    uint64_t over = l.data_off + chunks * g.chunk_bytes - g.region_bytes;
    chunks -= std::max<uint64_t>(1, std::min(chunks, (over + g.chunk_bytes - 1) / g.chunk_bytes));
  }
  Layout min = LayoutFor(g, 1, g.index_capacity ? g.index_capacity : 1024);
  return Status(Code::kPoolTooSmall,
                fmt::format("region_bytes={} cannot hold the metadata and one chunk of {} bytes "
                            "(needs at least {})",
                            g.region_bytes, g.chunk_bytes, min.data_off + g.chunk_bytes));
}

Geometry GeometryOf(const RegionHeader& h) {
  Geometry g;
  g.region_bytes = h.region_bytes;
  g.chunk_bytes = h.chunk_bytes;
  g.index_capacity = h.index_capacity;
  g.max_procs = h.max_procs;
  g.pin_records = h.pin_records;
  g.max_roots = h.max_roots;
  g.num_nodes = h.num_nodes;
  g.lease = h.lease_ns;
  g.model = static_cast<MemoryModel>(h.model);
  return g;
}

Status ValidateHeader(const RegionHeader& h, uint64_t file_bytes, const std::string& path) {
  if (h.magic != kMagic) {
    return Status(Code::kPoolBadMagic,
                  fmt::format("{}: not a dualpath pool region (magic {:#018x}, want {:#018x})",
                              path, h.magic, kMagic));
  }
  if (h.version != kVersion) {
    return Status(Code::kPoolBadVersion,
                  fmt::format("{}: region version {} (this build reads version {})", path,
                              h.version, kVersion));
  }
  if (h.init_state != kInitReady) {
    return Status(Code::kPoolBadMagic,
                  fmt::format("{}: region was never completely formatted", path));
  }
  if (h.header_bytes != kHeaderBytes || h.region_bytes > file_bytes) {
    return Status(Code::kPoolTooSmall,
                  fmt::format("{}: header says {} bytes but the file/device has {}", path,
                              h.region_bytes, file_bytes));
  }
  Geometry g = GeometryOf(h);
  // Validate the parameters with ComputeLayout, then recompute the offsets for the stored chunk
  // count (ComputeLayout would pick the count itself).
  Result<Layout> check = ComputeLayout(g);
  if (!check.ok()) {
    return Status(Code::kCorruption,
                  fmt::format("{}: header geometry invalid: {}", path, check.status().message()));
  }
  if (h.num_chunks == 0 || h.num_chunks > h.region_bytes / h.chunk_bytes) {
    return Status(Code::kCorruption,
                  fmt::format("{}: header chunk count {} invalid", path, h.num_chunks));
  }
  const Layout computed = LayoutFor(g, h.num_chunks, h.index_capacity);
  const Layout* l = &computed;
  if (l->data_off + h.num_chunks * h.chunk_bytes > h.region_bytes) {
    return Status(Code::kCorruption, fmt::format("{}: data area exceeds the region", path));
  }
  if (l->num_chunks != h.num_chunks || l->procs_off != h.procs_off || l->pins_off != h.pins_off ||
      l->bitmap_off != h.bitmap_off || l->chunks_off != h.chunks_off ||
      l->index_off != h.index_off || l->roots_off != h.roots_off || l->locks_off != h.locks_off ||
      l->data_off != h.data_off) {
    return Status(Code::kCorruption,
                  fmt::format("{}: header offsets disagree with its geometry", path));
  }
  return Status::Ok();
}

}  // namespace dualpath::pool::internal
