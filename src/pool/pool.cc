#include "dualpath/pool/pool.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>

#include "dualpath/common/check.h"
#include "dualpath/common/log.h"
#include "pool/fault.h"
#include "pool/pool_impl.h"

namespace dualpath::pool {

using namespace internal;  // NOLINT(google-build-using-namespace): the region structs

uint64_t HostIdFromBootId();  // recovery.cc
uint64_t SelfStartTime();     // recovery.cc

std::string_view MemoryModelName(MemoryModel m) {
  return m == MemoryModel::kNonCoherent ? "noncoherent" : "coherent";
}

Result<MemoryModel> ParseMemoryModel(std::string_view name) {
  if (name == "coherent") return MemoryModel::kCoherent;
  if (name == "noncoherent") return MemoryModel::kNonCoherent;
  return InvalidArgument(
      fmt::format("unknown memory model '{}' (want coherent or noncoherent)", name));
}

// ---------------------------------------------------------------------------------------------
// Create / open / destroy

namespace {

// Wall-clock time, for leases compared between hosts.
class RealtimeClock final : public Clock {
 public:
  Nanos Now() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// Reads and validates the header through an ordinary read-only mapping check, so that a foreign
// or damaged file is rejected before anything could be written to it.
Result<RegionHeader> ReadHeader(const Mapping& m) {
  if (m.bytes() < kHeaderBytes) {
    return Status(Code::kPoolTooSmall,
                  fmt::format("{}: {} bytes, smaller than a pool header ({} bytes)", m.path(),
                              m.bytes(), kHeaderBytes));
  }
  RegionHeader h;
  std::memcpy(&h, m.base(), sizeof(h));
  RETURN_IF_ERROR(ValidateHeader(h, m.bytes(), m.path()));
  return h;
}

// Stable key of a region for node-local file names: a hash of its canonical path.
std::string RegionKey(const std::string& path) {
  char buf[PATH_MAX];
  const char* canon = realpath(path.c_str(), buf);
  return fmt::format("{:016x}", std::hash<std::string>{}(canon ? canon : path));
}

}  // namespace

Status Pool::Create(const std::string& path, const Geometry& geometry) {
  ASSIGN_OR_RETURN(Layout l, ComputeLayout(geometry));
  ASSIGN_OR_RETURN(std::unique_ptr<Mapping> m, Mapping::Create(path, geometry.region_bytes));
  uint8_t* base = m->base();
  // Metadata starts zeroed (a new file is; a device is cleared here). The magic and
  // kInitReady are written last, so a crash during formatting leaves a region Open rejects.
  std::memset(base, 0, l.data_off);
  auto* h = reinterpret_cast<RegionHeader*>(base);
  h->version = kVersion;
  h->header_bytes = kHeaderBytes;
  h->region_bytes = geometry.region_bytes;
  h->model = static_cast<uint32_t>(geometry.model);
  h->chunk_bytes = geometry.chunk_bytes;
  h->num_chunks = l.num_chunks;
  h->index_capacity = l.index_capacity;
  h->max_procs = geometry.max_procs;
  h->pin_records = geometry.pin_records;
  h->max_roots = geometry.max_roots;
  h->num_nodes = geometry.num_nodes;
  h->lease_ns = geometry.lease;
  h->procs_off = l.procs_off;
  h->pins_off = l.pins_off;
  h->bitmap_off = l.bitmap_off;
  h->chunks_off = l.chunks_off;
  h->index_off = l.index_off;
  h->roots_off = l.roots_off;
  h->locks_off = l.locks_off;
  h->data_off = l.data_off;
  if (geometry.model == MemoryModel::kCoherent) {
    RETURN_IF_ERROR(InitCoherentMutex(base + l.locks_off));
  }
  FlushLines(base, l.data_off);
  h->magic = kMagic;
  FlushLines(h, sizeof(*h));
  St(h->init_state, kInitReady);
  FlushLines(h, sizeof(*h));
  return m->Link();
}

Result<std::unique_ptr<Pool>> Pool::OpenOrCreate(const std::string& path, const Geometry& geometry,
                                                 OpenOptions options) {
  // Open wins if the region exists; otherwise create it. Losing a creation race is kAlreadyExists
  // (then the winner's region is complete and named: open it). A region destroyed between the
  // two steps sends us round again; a few rounds cover any realistic interleaving.
  Status last = Status::Ok();
  for (int round = 0; round < 8; ++round) {
    Result<std::unique_ptr<Pool>> p = Open(path, options);
    if (p.ok() || p.status().code() != Code::kNotFound) return p;
    last = Create(path, geometry);
    if (!last.ok() && last.code() != Code::kAlreadyExists) return last;
  }
  return last.ok() ? Unavailable(fmt::format("{}: created and removed repeatedly", path)) : last;
}

Result<Geometry> Pool::ReadGeometry(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<Mapping> m, Mapping::Open(path));
  ASSIGN_OR_RETURN(RegionHeader h, ReadHeader(*m));
  return GeometryOf(h);
}

Status Pool::Destroy(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<Mapping> m, Mapping::Open(path));
  RETURN_IF_ERROR(ReadHeader(*m).status());
  const std::string key = RegionKey(path);
  if (m->is_device()) {
    // A device cannot be unlinked: un-format it (clear the magic) instead.
    auto* h = reinterpret_cast<RegionHeader*>(m->base());
    h->magic = 0;
    FlushLines(h, sizeof(*h));
    return Status::Ok();
  }
  if (unlink(path.c_str()) != 0) return ErrnoStatus("unlink " + path, errno);
  const Geometry g = GeometryOf(*reinterpret_cast<const RegionHeader*>(m->base()));
  // Node-local lock files of this region in the default local directory (non-coherent model).
  for (uint32_t n = 0; n < g.num_nodes; ++n) {
    unlink(fmt::format("{}/dualpath-pool-{}-node{}.lock", OpenOptions{}.local_dir, key, n).c_str());
  }
  return Status::Ok();
}

Result<std::unique_ptr<PoolImpl>> PoolImpl::Open(const std::string& path, OpenOptions options) {
  std::unique_ptr<PoolImpl> p(new PoolImpl());
  ASSIGN_OR_RETURN(p->mapping_, Mapping::Open(path));
  ASSIGN_OR_RETURN(RegionHeader h, ReadHeader(*p->mapping_));
  // A region is written through the mapping from here on: its pages must all be backed.
  RETURN_IF_ERROR(p->mapping_->Reserve());
  p->base_ = p->mapping_->base();
  p->geometry_ = GeometryOf(h);
  p->data_off_ = h.data_off;
  p->chunk_bytes_ = h.chunk_bytes;
  p->num_chunks_ = h.num_chunks;
  p->index_cap_ = h.index_capacity;
  p->options_ = options;
  p->sync_ = Sync(p->geometry_.model == MemoryModel::kNonCoherent);
  // Leases of processes on other hosts are compared across hosts: the non-coherent model needs a
  // clock all hosts agree on (CLOCK_REALTIME, PTP/NTP-synchronized), the coherent one does not.
  static const RealtimeClock kRealtime;
  const Clock* fallback = &SteadyClock::Default();
  if (p->geometry_.model == MemoryModel::kNonCoherent) fallback = &kRealtime;
  p->clock_ = options.clock ? options.clock : fallback;
  p->host_id_ = options.host_id ? options.host_id : HostIdFromBootId();
  p->start_time_ = SelfStartTime();
  p->heap_.resize(64);
  p->lock_timeout_ = options.lock_timeout > 0 ? options.lock_timeout : 3 * p->geometry_.lease;
  uint8_t* locks = p->base_ + h.locks_off;
  if (p->geometry_.model == MemoryModel::kCoherent) {
    p->lock_ = std::make_unique<CoherentLock>(locks, path);
  } else {
    PoolImpl* raw = p.get();
    TwoTierOptions lo;
    lo.num_nodes = p->geometry_.num_nodes;
    lo.node = options.node;
    lo.manager_node = options.manager_node;
    lo.local_dir = options.local_dir;
    lo.region_key = RegionKey(path);
    lo.name = path;
    lo.lease = p->geometry_.lease;
    lo.candidate = options.lock_manager;
    ASSIGN_OR_RETURN(
        p->lock_, TwoTierLock::Open(locks, lo, Holder{0, 0}, [raw](uint32_t plus1, uint32_t gen) {
          return raw->IsHolderDead(plus1, gen);
        }));
  }
  {
    Locked l(p.get());
    RETURN_IF_ERROR(l.status());
    RETURN_IF_ERROR(p->RegisterLocked());
  }
  if (auto* tt = dynamic_cast<TwoTierLock*>(p->lock_.get())) {
    tt->SetHolder(Holder{p->self_ + 1, p->self_gen_});
  }
  if (options.background_thread) {
    PoolImpl* raw = p.get();
    p->background_ = std::thread([raw] { raw->BackgroundLoop(); });
  }
  return p;
}

PoolImpl::~PoolImpl() {
  if (background_.joinable()) {
    {
      std::lock_guard<std::mutex> g(bg_mu_);
      bg_stop_ = true;
    }
    bg_cv_.notify_all();
    background_.join();
  }
  if (registered_ && lock_) {
    Locked l(this);
    if (l.status().ok()) {
      UnregisterLocked();
    } else {
      // Our slot is reclaimed like a dead process's once we are gone (pid check or lease).
      log::Warn("pool: detaching without unregistering: {}", l.status().ToString());
    }
  }
}

Locked::Locked(PoolImpl* p) : p_(p) {
  Result<bool> inherited = p_->lock_->Acquire(p_->lock_timeout_);
  if (!inherited.ok()) {
    status_ = inherited.status();
    return;
  }
  held_ = true;
  FaultPoint("lock.acquired");
  if (*inherited) {
    p_->SweepLocked();
    p_->lock_->ClearRecovery();
  }
}

Locked::~Locked() {
  if (!held_) return;
  FaultPoint("lock.releasing");
  p_->lock_->Release();
}

// ---------------------------------------------------------------------------------------------
// Blocks

namespace {
Status BadHandle(std::string_view what) {
  return Status(Code::kFailedPrecondition,
                fmt::format("pool: {}: handle is not a live reservation of this process", what));
}
// Blocks up to this size are copied in and out while holding the metadata lock (one lock
// round trip per put or get instead of two); larger ones are copied outside it.
constexpr uint64_t kInlineCopyMax = 64 << 10;
}  // namespace

Status PoolImpl::CheckBlockSize(uint64_t size) const {
  if (size == 0) return InvalidArgument("pool: block size 0");
  if (size > num_chunks_ * chunk_bytes_ || size > kMaxBlockBytes) {
    return InvalidArgument(
        fmt::format("pool: block of {} bytes is larger than the region's data "
                    "area ({} bytes) or 4 GiB",
                    size, num_chunks_ * chunk_bytes_));
  }
  return Status::Ok();
}

uint64_t PoolImpl::NextTickLocked() {
  RegionHeader* h = H();
  sync_.Fresh(&h->lru_clock, kCacheLine);
  const uint64_t tick = Ld(h->lru_clock) + 1;
  St(h->lru_clock, tick);
  sync_.Publish(&h->lru_clock, kCacheLine);
  return tick;
}

Result<WriteHandle> PoolImpl::ReserveLocked(const BlockHash& hash, uint64_t size,
                                            uint64_t user_tag) {
  if (FindLocked(hash)) {
    return Status(Code::kAlreadyExists, fmt::format("pool: block {} already present", hash.Hex()));
  }
  // Space first, then the index slot: eviction may turn tombstones into empty slots, which would
  // cut a probe chain if our slot had been chosen before.
  ASSIGN_OR_RETURN(uint64_t off, AllocateOrEvictLocked(size));
  FaultPoint("reserve.allocated");
  std::optional<uint64_t> slot = FindFreeSlotLocked(hash);
  if (!slot) {
    FreeLocked(off, size);
    return Status(Code::kPoolIndexFull, fmt::format("pool: index full ({} entries)", index_cap_));
  }
  IndexEntry* e = Entry(*slot);
  sync_.Fresh(e);
  const uint64_t seq = TagSeq(Ld(e->tag)) + 1;
  // Fill every field while the slot is still free, then flip the tag: the tag store is the
  // commit point of the insertion (a crash before it leaves a free slot).
  uint64_t w[4];
  std::memcpy(w, hash.bytes.data(), 32);
  for (int i = 0; i < 4; ++i) St(e->hash[i], w[i]);
  St(e->data_off, off);
  St(e->length, static_cast<uint32_t>(size));
  St(e->user_tag, user_tag);
  St(e->pins, 0u);
  St(e->writer_plus1, self_ + 1);
  St(e->writer_gen, self_gen_);
  St(e->last_access, uint64_t{0});
  sync_.Publish(e);
  FaultPoint("reserve.filled");
  St(e->tag, MakeTag(seq, kWriting));
  sync_.Publish(e, kCacheLine);
  FaultPoint("reserve.writing");
  return WriteHandle{reinterpret_cast<std::byte*>(base_ + off), size, static_cast<uint32_t>(*slot),
                     seq};
}

Status PoolImpl::PublishLocked(WriteHandle& handle, std::optional<uint64_t> user_tag) {
  IndexEntry* e = Entry(handle.entry);
  sync_.Fresh(e);
  if (Ld(e->tag) != MakeTag(handle.seq, kWriting) || Ld(e->writer_plus1) != self_ + 1 ||
      Ld(e->writer_gen) != self_gen_) {
    return BadHandle("publish");
  }
  St(e->last_access, NextTickLocked());
  St(e->writer_plus1, 0u);
  if (user_tag) St(e->user_tag, *user_tag);
  sync_.Publish(e);
  FaultPoint("publish.before_ready");
  // The visibility boundary: payload and fields were written (and flushed) before this store.
  St(e->tag, MakeTag(handle.seq + 1, kReady));
  sync_.Publish(e, kCacheLine);
  handle = WriteHandle{};
  return Status::Ok();
}

void PoolImpl::CopyIn(std::byte* dst, std::span<const std::byte> payload) const {
  if (sync_.noncoherent()) {
    StreamCopy(dst, payload.data(), payload.size());
  } else {
    std::memcpy(dst, payload.data(), payload.size());
  }
}

Result<WriteHandle> PoolImpl::Reserve(const BlockHash& hash, uint64_t size, uint64_t user_tag) {
  RETURN_IF_ERROR(CheckBlockSize(size));
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  return ReserveLocked(hash, size, user_tag);
}

Status PoolImpl::Publish(WriteHandle& handle, bool payload_streamed,
                         std::optional<uint64_t> user_tag) {
  if (handle.entry >= index_cap_) return BadHandle("publish");
  if (sync_.noncoherent() && !payload_streamed) {
    // The caller wrote through the cache: write the payload back before it becomes visible.
    FlushLines(handle.data, handle.size);
  }
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  return PublishLocked(handle, user_tag);
}

Status PoolImpl::Abort(WriteHandle& handle) {
  if (handle.entry >= index_cap_) return BadHandle("abort");
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  IndexEntry* e = Entry(handle.entry);
  sync_.Fresh(e);
  if (Ld(e->tag) != MakeTag(handle.seq, kWriting) || Ld(e->writer_plus1) != self_ + 1 ||
      Ld(e->writer_gen) != self_gen_) {
    return BadHandle("abort");
  }
  RemoveLocked(handle.entry);
  handle = WriteHandle{};
  return Status::Ok();
}

Status PoolImpl::Put(const BlockHash& hash, std::span<const std::byte> payload, uint64_t user_tag) {
  RETURN_IF_ERROR(CheckBlockSize(payload.size()));
  if (payload.size() <= kInlineCopyMax) {
    Locked l(this);
    RETURN_IF_ERROR(l.status());
    ASSIGN_OR_RETURN(WriteHandle w, ReserveLocked(hash, payload.size(), user_tag));
    CopyIn(w.data, payload);
    return PublishLocked(w);
  }
  ASSIGN_OR_RETURN(WriteHandle w, Reserve(hash, payload.size(), user_tag));
  CopyIn(w.data, payload);
  return Publish(w, /*payload_streamed=*/true);
}

bool PoolImpl::Contains(const BlockHash& hash) const { return FindReadyLockFree(hash).has_value(); }

size_t PoolImpl::LongestPrefix(std::span<const BlockHash> chain) const {
  size_t n = 0;
  while (n < chain.size() && FindReadyLockFree(chain[n])) ++n;
  return n;
}

Result<PinnedBlock> PoolImpl::Pin(const BlockHash& hash) {
  PinnedBlock b;
  {
    Locked l(this);
    RETURN_IF_ERROR(l.status());
    std::optional<uint64_t> i = FindLocked(hash);
    if (!i || TagState(Ld(Entry(*i)->tag)) != kReady) {
      return NotFound(fmt::format("pool: block {} not present", hash.Hex()));
    }
    if (!AddPinRecordLocked(static_cast<uint32_t>(*i), +1)) {
      return Status(Code::kResourceExhausted,
                    fmt::format("pool: this process already pins {} blocks (pin_records)",
                                geometry_.pin_records));
    }
    IndexEntry* e = Entry(*i);
    const uint64_t tick = NextTickLocked();
    FaultPoint("pin.recorded");
    St(e->pins, Ld(e->pins) + 1);
    St(e->last_access, tick);
    sync_.Publish(e);
    b.data = reinterpret_cast<const std::byte*>(base_ + Ld(e->data_off));
    b.size = Ld(e->length);
    b.user_tag = Ld(e->user_tag);
    b.entry = static_cast<uint32_t>(*i);
  }
  // Drop any stale cached copy of the payload (lines of an earlier block at this address).
  if (sync_.noncoherent()) InvalidateRange(b.data, b.size);
  return b;
}

Status PoolImpl::Unpin(PinnedBlock& block) {
  if (block.data == nullptr || block.entry >= index_cap_) {
    return FailedPrecondition("pool: unpin of a block that is not pinned");
  }
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  IndexEntry* e = Entry(block.entry);
  sync_.Fresh(e);
  if (!AddPinRecordLocked(block.entry, -1)) {
    return FailedPrecondition("pool: unpin of a block this process does not pin");
  }
  DUALPATH_CHECK(Ld(e->pins) > 0, "pool: pin count underflow");
  FaultPoint("unpin.recorded");
  St(e->pins, Ld(e->pins) - 1);
  sync_.Publish(e);
  block = PinnedBlock{};
  return Status::Ok();
}

Result<uint64_t> PoolImpl::Get(const BlockHash& hash, std::span<std::byte> out,
                               uint64_t* user_tag) {
  {
    Locked l(this);
    RETURN_IF_ERROR(l.status());
    std::optional<uint64_t> i = FindLocked(hash);
    if (!i || TagState(Ld(Entry(*i)->tag)) != kReady) {
      return NotFound(fmt::format("pool: block {} not present", hash.Hex()));
    }
    IndexEntry* e = Entry(*i);
    const uint64_t size = Ld(e->length);
    if (out.size() < size) {
      return OutOfRange(fmt::format("pool: block {} has {} bytes, buffer holds {}", hash.Hex(),
                                    size, out.size()));
    }
    if (size <= kInlineCopyMax) {
      // Small block: copy under the lock (nobody can remove it meanwhile), no pin needed.
      St(e->last_access, NextTickLocked());
      sync_.Publish(e, kCacheLine);
      const std::byte* src = reinterpret_cast<const std::byte*>(base_ + Ld(e->data_off));
      if (sync_.noncoherent()) InvalidateRange(src, size);
      std::memcpy(out.data(), src, size);
      sync_.Fresh(e);
      if (user_tag) *user_tag = Ld(e->user_tag);
      return size;
    }
  }
  ASSIGN_OR_RETURN(PinnedBlock b, Pin(hash));
  const uint64_t size = b.size;
  if (out.size() < size) {  // it was replaced by a larger block in between
    RETURN_IF_ERROR(Unpin(b));
    return OutOfRange(
        fmt::format("pool: block {} has {} bytes, buffer holds {}", hash.Hex(), size, out.size()));
  }
  std::memcpy(out.data(), b.data, size);
  if (user_tag) *user_tag = b.user_tag;
  RETURN_IF_ERROR(Unpin(b));
  return size;
}

Status PoolImpl::Delete(const BlockHash& hash) {
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  std::optional<uint64_t> i = FindLocked(hash);
  if (!i || TagState(Ld(Entry(*i)->tag)) != kReady) {
    return NotFound(fmt::format("pool: block {} not present", hash.Hex()));
  }
  if (Ld(Entry(*i)->pins) != 0) {
    return Status(Code::kPoolPinned, fmt::format("pool: block {} is pinned", hash.Hex()));
  }
  RemoveLocked(*i);
  return Status::Ok();
}

Result<size_t> PoolImpl::Evict(size_t n) {
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  size_t done = 0;
  while (done < n && EvictOneLocked()) ++done;
  return done;
}

}  // namespace dualpath::pool
