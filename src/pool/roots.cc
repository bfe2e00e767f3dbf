// Named root objects (TraCT's object store: put/get/destroy) and pool statistics.
#include <fmt/format.h>

#include <cstring>

#include "pool/fault.h"
#include "pool/pool_impl.h"

namespace dualpath::pool {

using namespace internal;  // NOLINT(google-build-using-namespace): the region structs

namespace {

Status CheckName(std::string_view name) {
  if (name.empty() || name.size() >= kRootNameBytes) {
    return InvalidArgument(
        fmt::format("pool: root name '{}' must have 1..{} characters", name, kRootNameBytes - 1));
  }
  if (name.find('\0') != std::string_view::npos) {
    return InvalidArgument("pool: root name contains a NUL byte");
  }
  return Status::Ok();
}

bool NameIs(const RootEntry* r, std::string_view name) {
  return std::strncmp(r->name, std::string(name).c_str(), kRootNameBytes) == 0;
}

}  // namespace

bool PoolImpl::RootOwnerLiveLocked(const RootEntry* r) const {
  const uint32_t plus1 = Ld(r->owner_plus1);
  if (plus1 == 0) return true;  // persistent: never reclaimed
  if (plus1 > geometry_.max_procs) return false;
  const ProcSlot* p = Proc(plus1 - 1);
  sync_.Fresh(p);
  return Ld(p->state) == kProcLive && Ld(p->generation) == Ld(r->owner_gen) &&
         !IsProcDead(plus1 - 1);
}

Result<std::span<std::byte>> PoolImpl::CreateRoot(std::string_view name, uint64_t size,
                                                  RootLifetime lifetime) {
  RETURN_IF_ERROR(CheckName(name));
  if (size == 0 || size > num_chunks_ * chunk_bytes_) {
    return InvalidArgument(
        fmt::format("pool: root size {} must be in [1, {}]", size, num_chunks_ * chunk_bytes_));
  }
  if (lifetime != RootLifetime::kPersistent && lifetime != RootLifetime::kProcess) {
    return InvalidArgument(
        fmt::format("pool: root lifetime {} unknown", static_cast<uint32_t>(lifetime)));
  }
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  constexpr uint32_t kNone = ~0u;
  uint32_t free_slot = kNone;
  bool swept = false;
  for (bool rescan = true; rescan;) {
    rescan = false;
    free_slot = kNone;
    for (uint32_t i = 0; i < geometry_.max_roots; ++i) {
      RootEntry* r = Root(i);
      sync_.Fresh(r);
      if (Ld(r->state) == kReady && NameIs(r, name)) {
        if (swept || RootOwnerLiveLocked(r)) {
          return Status(Code::kAlreadyExists, fmt::format("pool: root '{}' exists", name));
        }
        // Its owner is gone but no sweep has run since: run it now (it drops this root with
        // everything else the dead held) and scan again.
        SweepLocked();
        swept = true;
        rescan = true;
        break;
      }
      if (Ld(r->state) != kReady && free_slot == kNone) free_slot = i;
    }
  }
  if (free_slot == kNone) {
    return Status(Code::kResourceExhausted,
                  fmt::format("pool: all {} root slots in use", geometry_.max_roots));
  }
  // Roots take whole chunk runs (they are few and long-lived). Capacity held by dead processes
  // (their owner-bound roots among it) comes back before live blocks are evicted.
  const uint64_t chunks = (size + chunk_bytes_ - 1) / chunk_bytes_;
  Result<uint64_t> off = AllocateRunLocked(chunks);
  if (!off.ok() && AnyProcGone()) {
    SweepLocked();
    off = AllocateRunLocked(chunks);
  }
  while (!off.ok()) {
    if (!EvictOneLocked()) return off.status();
    off = AllocateRunLocked(chunks);
  }
  std::memset(base_ + *off, 0, size);
  sync_.Publish(base_ + *off, size);
  RootEntry* r = Root(free_slot);
  std::memset(r->name, 0, kRootNameBytes);
  std::memcpy(r->name, name.data(), name.size());
  St(r->data_off, *off);
  St(r->length, size);
  // The owner is part of the truth: written before the commit store, so a READY root always
  // names its owner and the sweep can tell whether it outlived it.
  const bool owned = lifetime == RootLifetime::kProcess;
  St(r->owner_plus1, owned ? self_ + 1 : 0u);
  St(r->owner_gen, owned ? self_gen_ : 0u);
  sync_.Publish(r);
  FaultPoint("root.before_commit");
  St(r->state, uint64_t{kReady});  // commit point
  sync_.Publish(r);
  return std::span<std::byte>(reinterpret_cast<std::byte*>(base_ + *off), size);
}

Result<std::span<std::byte>> PoolImpl::GetRoot(std::string_view name) {
  RETURN_IF_ERROR(CheckName(name));
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  for (uint32_t i = 0; i < geometry_.max_roots; ++i) {
    RootEntry* r = Root(i);
    sync_.Fresh(r);
    if (Ld(r->state) == kReady && NameIs(r, name)) {
      return std::span<std::byte>(reinterpret_cast<std::byte*>(base_ + Ld(r->data_off)),
                                  Ld(r->length));
    }
  }
  return NotFound(fmt::format("pool: no root '{}'", name));
}

Status PoolImpl::DestroyRoot(std::string_view name) {
  RETURN_IF_ERROR(CheckName(name));
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  for (uint32_t i = 0; i < geometry_.max_roots; ++i) {
    RootEntry* r = Root(i);
    sync_.Fresh(r);
    if (Ld(r->state) == kReady && NameIs(r, name)) {
      St(r->state, uint64_t{kEmpty});  // unpublish, then free (crash-safe order)
      sync_.Publish(r);
      FreeLocked(Ld(r->data_off), Ld(r->length));
      return Status::Ok();
    }
  }
  return NotFound(fmt::format("pool: no root '{}'", name));
}

PoolStats PoolImpl::Stats() {
  PoolStats s;
  s.model = geometry_.model;
  s.region_bytes = geometry_.region_bytes;
  s.chunk_bytes = chunk_bytes_;
  s.num_chunks = num_chunks_;
  s.index_capacity = index_cap_;
  if (const auto* tt = dynamic_cast<const TwoTierLock*>(lock_.get())) {
    const ManagerView m = tt->Manager();  // lock-free: it is what a stuck lock is explained by
    s.manager_epoch = m.epoch >> kEpochNodeBits;
    s.manager_node = m.node;
    s.manager_pid = m.pid;
  }
  Locked l(this);
  if (!l.status().ok()) {
    s.lock_error = l.status().ToString();
    return s;
  }
  RegionHeader* h = H();
  sync_.Fresh(h, sizeof(*h));
  s.free_chunks = FreeChunksLocked();
  for (uint64_t i = 0; i < index_cap_; ++i) {
    const IndexEntry* e = Entry(i);
    sync_.Fresh(e);
    const uint64_t st = TagState(Ld(e->tag));
    if (st == kReady) ++s.ready_entries;
    if (st == kWriting) ++s.writing_entries;
    if (st == kReady || st == kWriting) {
      const uint64_t len = Ld(e->length);
      s.used_bytes += len > chunk_bytes_ ? (len + chunk_bytes_ - 1) / chunk_bytes_ * chunk_bytes_
                                         : uint64_t{1} << SlotShift(len);
    }
    if (Ld(e->pins) > 0) {
      ++s.pinned_entries;
      s.total_pins += Ld(e->pins);
    }
  }
  for (uint32_t i = 0; i < geometry_.max_roots; ++i) {
    const RootEntry* r = Root(i);
    sync_.Fresh(r);
    if (Ld(r->state) == kReady) {
      ++s.roots;
      s.used_bytes += (Ld(r->length) + chunk_bytes_ - 1) / chunk_bytes_ * chunk_bytes_;
      RootInfo info;
      info.name.assign(r->name, strnlen(r->name, kRootNameBytes));
      info.bytes = Ld(r->length);
      const uint32_t owner = Ld(r->owner_plus1);
      if (owner != 0) {
        info.lifetime = RootLifetime::kProcess;
        if (owner <= geometry_.max_procs && Ld(Proc(owner - 1)->generation) == Ld(r->owner_gen)) {
          info.owner_pid = Ld(Proc(owner - 1)->pid);
        }
      }
      s.root_list.push_back(std::move(info));
    }
  }
  for (uint32_t i = 0; i < geometry_.max_procs; ++i) {
    const ProcSlot* p = Proc(i);
    sync_.Fresh(p);
    if (Ld(p->state) != kProcLive) continue;
    ++s.live_procs;
    ProcInfo info;
    info.slot = i;
    info.pid = Ld(p->pid);
    info.node = Ld(p->node);
    const PinRecord* recs = Pins(i);
    sync_.Fresh(recs, sizeof(PinRecord) * geometry_.pin_records);
    for (uint32_t r = 0; r < geometry_.pin_records; ++r) {
      if (Ld(recs[r].entry_plus1) != 0) info.pins += Ld(recs[r].count);
    }
    s.procs.push_back(info);
  }
  for (uint64_t i = 0; i < index_cap_; ++i) {
    const IndexEntry* e = Entry(i);
    if (TagState(Ld(e->tag)) != kWriting) continue;
    for (ProcInfo& info : s.procs) {
      if (Ld(e->writer_plus1) == info.slot + 1 &&
          Ld(e->writer_gen) == Ld(Proc(info.slot)->generation)) {
        ++info.writing;
      }
    }
  }
  s.evictions = Ld(h->evictions);
  s.sweeps = Ld(h->sweeps);
  s.reclaimed_procs = Ld(h->reclaimed_procs);
  s.reclaimed_roots = Ld(h->reclaimed_roots);
  return s;
}

}  // namespace dualpath::pool
