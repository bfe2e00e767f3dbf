// Process identity, leases and the recovery sweep.
//
// A process is dead when (same host) its pid no longer exists or now belongs to a process with a
// different start time, or (another host) its lease expired without renewal. The sweep then
// takes away everything it held: its owner-bound roots and WRITING entries (space freed), its
// pins (entries become evictable), its heap's chunks (orphaned: still holding live blocks, reusable
// by anyone), and rebuilds every derived structure from the truth, so a crash at any point of any
// critical section leaves nothing inconsistent behind.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "dualpath/common/check.h"
#include "dualpath/common/log.h"
#include "pool/fault.h"
#include "pool/pool_impl.h"

namespace dualpath::pool {

using namespace internal;  // NOLINT(google-build-using-namespace): the region structs

namespace {

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); 0 if the process is gone.
uint64_t ProcStartTime(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  std::ifstream in(path);
  std::string s;
  if (!std::getline(in, s)) return 0;
  // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
  const size_t rp = s.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream rest(s.substr(rp + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  // A zombie (state Z, field 3) is dead for our purposes: it will never release anything.
  if (s[rp + 2] == 'Z') return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

}  // namespace

uint64_t HostIdFromBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  const uint64_t h = std::hash<std::string>{}(id);
  return h == 0 ? 1 : h;
}

uint64_t SelfStartTime() { return ProcStartTime(getpid()); }

bool PoolImpl::IsProcDead(uint32_t i) const {
  const ProcSlot* p = Proc(i);
  sync_.Fresh(p);
  if (Ld(p->state) != kProcLive) return false;
  if (Ld(p->host_id) == host_id_) {
    const int pid = Ld(p->pid);
    return ProcStartTime(pid) != Ld(p->start_time);
  }
  return Ld(p->lease_expiry_ns) < clock_->Now();
}

bool PoolImpl::IsHolderDead(uint32_t proc_plus1, uint32_t gen) const {
  if (proc_plus1 == 0 || proc_plus1 > geometry_.max_procs) return false;  // unknown: never revoke
  const ProcSlot* p = Proc(proc_plus1 - 1);
  sync_.Fresh(p);
  if (Ld(p->generation) != gen) return true;  // the slot was reclaimed: that holder is gone
  return IsProcDead(proc_plus1 - 1);
}

bool PoolImpl::AnyProcGone() const {
  // Cheap check for the allocation path: kill(pid, 0) only (no /proc parsing), same host only.
  for (uint32_t i = 0; i < geometry_.max_procs; ++i) {
    const ProcSlot* p = Proc(i);
    sync_.Fresh(p);
    if (Ld(p->state) == kProcLive && Ld(p->host_id) == host_id_ && kill(Ld(p->pid), 0) != 0 &&
        errno == ESRCH) {
      return true;
    }
  }
  return false;
}

bool PoolImpl::AnyProcDead() const {
  for (uint32_t i = 0; i < geometry_.max_procs; ++i) {
    if (IsProcDead(i)) return true;
  }
  return false;
}

void PoolImpl::RenewLease() {
  if (!registered_) return;
  ProcSlot* p = Proc(self_);
  St(p->lease_expiry_ns, clock_->Now() + geometry_.lease);
  sync_.Publish(p);
}

Status PoolImpl::RegisterLocked() {
  if (AnyProcDead()) SweepLocked();
  for (uint32_t i = 0; i < geometry_.max_procs; ++i) {
    ProcSlot* p = Proc(i);
    sync_.Fresh(p);
    if (Ld(p->state) != kProcFree) continue;
    self_ = i;
    self_gen_ = Ld(p->generation) + 1;
    St(p->generation, self_gen_);
    St(p->pid, static_cast<int32_t>(getpid()));
    St(p->node, options_.node);
    St(p->start_time, start_time_);
    St(p->host_id, host_id_);
    St(p->lease_expiry_ns, clock_->Now() + geometry_.lease);
    sync_.Publish(p);
    // Clear any stale pin records before the slot becomes live.
    PinRecord* recs = Pins(i);
    std::memset(static_cast<void*>(recs), 0, sizeof(PinRecord) * geometry_.pin_records);
    sync_.Publish(recs, sizeof(PinRecord) * geometry_.pin_records);
    St(p->state, uint32_t{kProcLive});
    sync_.Publish(p);
    registered_ = true;
    return Status::Ok();
  }
  return Status(Code::kResourceExhausted,
                fmt::format("pool: all {} process slots are in use", geometry_.max_procs));
}

void PoolImpl::UnregisterLocked() {
  // Leaving cleanly is the same as dying, minus the wait: mark the slot free and sweep.
  ProcSlot* p = Proc(self_);
  sync_.Fresh(p);
  // Only if the slot is still ours: a sweep may have declared us dead (lease expired) and the
  // slot may belong to another process by now.
  if (Ld(p->state) == kProcLive && Ld(p->generation) == self_gen_) {
    St(p->state, uint32_t{kProcFree});
    sync_.Publish(p);
  }
  registered_ = false;
  SweepLocked();
}

bool PoolImpl::AddPinRecordLocked(uint32_t entry, int delta) {
  PinRecord* recs = Pins(self_);
  const uint32_t mask = geometry_.pin_records - 1;
  const uint32_t home = (entry * 2654435761u) & mask;
  std::optional<uint32_t> free_slot;
  for (uint32_t n = 0; n <= mask; ++n) {
    PinRecord* r = &recs[(home + n) & mask];
    const uint32_t e = Ld(r->entry_plus1);
    if (e == entry + 1) {
      const uint32_t c = Ld(r->count);
      if (delta < 0 && c == 0) return false;
      const uint32_t nc = static_cast<uint32_t>(static_cast<int64_t>(c) + delta);
      // A record stays (count 0) rather than being removed: removal would break probe chains;
      // the sweep compacts.
      St(r->count, nc);
      sync_.Publish(r, sizeof(*r));
      return true;
    }
    if (e == 0) {
      if (!free_slot) free_slot = (home + n) & mask;
      break;
    }
  }
  if (delta < 0) return false;
  if (!free_slot) {
    // Reuse a record whose count dropped to zero.
    for (uint32_t n = 0; n <= mask && !free_slot; ++n) {
      if (Ld(recs[(home + n) & mask].count) == 0) free_slot = (home + n) & mask;
    }
    if (!free_slot) return false;
    // Reusing a zero record in the middle of a chain moves the entry off its own chain only if
    // it was not found above, which is the case here.
  }
  PinRecord* r = &recs[*free_slot];
  St(r->count, 0u);
  St(r->entry_plus1, entry + 1);
  St(r->count, static_cast<uint32_t>(delta));
  sync_.Publish(r, sizeof(*r));
  return true;
}

void PoolImpl::SweepLocked() {
  RegionHeader* h = H();
  // 1. Dead processes lose their slot (the generation bump makes stale references mismatch).
  std::vector<bool> live(geometry_.max_procs, false);
  for (uint32_t i = 0; i < geometry_.max_procs; ++i) {
    ProcSlot* p = Proc(i);
    sync_.Fresh(p);
    if (Ld(p->state) != kProcLive) continue;
    if (IsProcDead(i)) {
      log::Debug("pool: reclaiming process slot {} (pid {})", i, Ld(p->pid));
      St(p->state, uint32_t{kProcFree});
      St(p->generation, Ld(p->generation) + 1);
      sync_.Publish(p);
      St(h->reclaimed_procs, Ld(h->reclaimed_procs) + 1);
    } else {
      live[i] = true;
    }
  }
  auto live_owner = [&](uint32_t plus1, uint32_t gen) {
    if (plus1 == 0 || plus1 > geometry_.max_procs || !live[plus1 - 1]) return false;
    return Ld(Proc(plus1 - 1)->generation) == gen;
  };
  // 2a. Owner-bound roots whose owner is no longer live are dropped (one commit store each);
  // step 4 then rebuilds the allocator without them, so their chunks are free again.
  for (uint32_t r = 0; r < geometry_.max_roots; ++r) {
    RootEntry* re = Root(r);
    sync_.Fresh(re);
    if (Ld(re->state) != kReady || Ld(re->owner_plus1) == 0) continue;
    if (live_owner(Ld(re->owner_plus1), Ld(re->owner_gen))) continue;
    log::Debug("pool: reclaiming root '{}' ({} bytes) of a departed owner",
               std::string(re->name, strnlen(re->name, kRootNameBytes)), Ld(re->length));
    St(re->state, uint64_t{kEmpty});
    sync_.Publish(re);
    St(h->reclaimed_roots, Ld(h->reclaimed_roots) + 1);
  }
  FaultPoint("sweep.roots_dropped");
  // 2b. WRITING entries of dead writers are dropped; pin counts are rebuilt below.
  for (uint64_t i = 0; i < index_cap_; ++i) {
    IndexEntry* e = Entry(i);
    sync_.Fresh(e);
    const uint64_t tag = Ld(e->tag);
    if (TagState(tag) == kWriting && !live_owner(Ld(e->writer_plus1), Ld(e->writer_gen))) {
      St(e->tag, MakeTag(TagSeq(tag) + 1, kTombstone));
      sync_.Publish(e);
    }
    if (Ld(e->pins) != 0) {
      St(e->pins, 0u);
      sync_.Publish(e);
    }
  }
  // 3. Pins: the truth is the live processes' pin records. Each table is compacted (records
  // with count 0 dropped, the rest reinserted) and the entry counts are summed from it.
  const uint32_t rmask = geometry_.pin_records - 1;
  for (uint32_t p = 0; p < geometry_.max_procs; ++p) {
    PinRecord* recs = Pins(p);
    const size_t table_bytes = sizeof(PinRecord) * geometry_.pin_records;
    sync_.Fresh(recs, table_bytes);
    std::vector<PinRecord> keep;
    for (uint32_t r = 0; r < geometry_.pin_records; ++r) {
      const uint32_t e = Ld(recs[r].entry_plus1);
      const uint32_t count = Ld(recs[r].count);
      if (e == 0 || count == 0 || !live[p] || e > index_cap_) continue;
      IndexEntry* ent = Entry(e - 1);
      if (TagState(Ld(ent->tag)) != kReady) continue;
      keep.push_back(PinRecord{e, count});
      St(ent->pins, Ld(ent->pins) + count);
      sync_.Publish(ent);
    }
    for (uint32_t r = 0; r < geometry_.pin_records; ++r) {
      St(recs[r].entry_plus1, 0u);
      St(recs[r].count, 0u);
    }
    for (const PinRecord& k : keep) {
      uint32_t slot = ((k.entry_plus1 - 1) * 2654435761u) & rmask;
      while (Ld(recs[slot].entry_plus1) != 0) slot = (slot + 1) & rmask;
      St(recs[slot].entry_plus1, k.entry_plus1);
      St(recs[slot].count, k.count);
    }
    sync_.Publish(recs, table_bytes);
  }
  FaultPoint("sweep.pins_rebuilt");
  // 4. Allocator: rebuild every chunk descriptor and the bitmap from the live entries and roots.
  std::vector<ChunkDesc> old(num_chunks_);
  for (uint64_t c = 0; c < num_chunks_; ++c) {
    sync_.Fresh(Chunk(c));
    old[c] = *Chunk(c);
    St(Chunk(c)->state, uint32_t{kChunkFree});
    St(Chunk(c)->used_bits, uint64_t{0});
    St(Chunk(c)->run_len, 0u);
  }
  auto mark = [&](uint64_t off, uint64_t len, bool root) {
    DUALPATH_CHECK(off >= data_off_ && off + len <= data_off_ + num_chunks_ * chunk_bytes_,
                   "pool: live entry points outside the data area");
    const uint64_t c = (off - data_off_) / chunk_bytes_;
    ChunkDesc* d = Chunk(c);
    if (root || len > chunk_bytes_) {
      const uint64_t k = (len + chunk_bytes_ - 1) / chunk_bytes_;
      DUALPATH_CHECK(Ld(d->state) == kChunkFree, "pool: two live objects share a chunk run");
      for (uint64_t i = c; i < c + k; ++i) {
        St(Chunk(i)->state, i == c ? uint32_t{kChunkRunHead} : uint32_t{kChunkRunTail});
        St(Chunk(i)->owner_plus1, kNoOwner);
      }
      St(d->run_len, static_cast<uint32_t>(k));
      return;
    }
    const uint32_t shift = SlotShift(len);
    const uint64_t bit = uint64_t{1} << ((off - data_off_ - c * chunk_bytes_) >> shift);
    if (Ld(d->state) == kChunkFree) {
      St(d->state, uint32_t{kChunkSlab});
      St(d->slot_shift, shift);
      const bool keep = old[c].state == kChunkSlab && old[c].slot_shift == shift &&
                        live_owner(old[c].owner_plus1, old[c].owner_gen);
      St(d->owner_plus1, keep ? old[c].owner_plus1 : kNoOwner);
      St(d->owner_gen, keep ? old[c].owner_gen : 0u);
    }
    DUALPATH_CHECK(Ld(d->state) == kChunkSlab && Ld(d->slot_shift) == shift,
                   "pool: live entries of different sizes share a chunk");
    DUALPATH_CHECK((Ld(d->used_bits) & bit) == 0, "pool: two live entries share a slot");
    St(d->used_bits, Ld(d->used_bits) | bit);
  };
  for (uint64_t i = 0; i < index_cap_; ++i) {
    const IndexEntry* e = Entry(i);
    const uint64_t st = TagState(Ld(e->tag));
    if (st == kReady || st == kWriting) mark(Ld(e->data_off), Ld(e->length), false);
  }
  for (uint32_t r = 0; r < geometry_.max_roots; ++r) {
    const RootEntry* re = Root(r);
    sync_.Fresh(re);
    if (Ld(re->state) == kReady) mark(Ld(re->data_off), Ld(re->length), true);
  }
  const uint64_t words = (num_chunks_ + 63) / 64;
  for (uint64_t w = 0; w < words; ++w) St(Bitmap()[w], uint64_t{0});
  for (uint64_t c = 0; c < num_chunks_; ++c) {
    sync_.Publish(Chunk(c));
    if (Ld(Chunk(c)->state) != kChunkFree) {
      St(Bitmap()[c / 64], Ld(Bitmap()[c / 64]) | (uint64_t{1} << (c % 64)));
    }
  }
  sync_.Publish(Bitmap(), words * 8);
  for (auto& v : heap_) v.clear();
  // Re-adopt our own surviving slabs.
  for (uint64_t c = 0; c < num_chunks_; ++c) {
    const ChunkDesc* d = Chunk(c);
    if (registered_ && Ld(d->state) == kChunkSlab && Ld(d->owner_plus1) == self_ + 1 &&
        Ld(d->owner_gen) == self_gen_) {
      heap_[Ld(d->slot_shift)].push_back(static_cast<uint32_t>(c));
    }
  }
  St(h->sweeps, Ld(h->sweeps) + 1);
  sync_.Publish(&h->lru_clock, kCacheLine);
}

Status PoolImpl::Tick() {
  RenewLease();
  if (AnyProcDead()) {
    Locked l(this);
    RETURN_IF_ERROR(l.status());
    SweepLocked();
  }
  return Status::Ok();
}

Status PoolImpl::Recover() {
  Locked l(this);
  RETURN_IF_ERROR(l.status());
  SweepLocked();
  return Status::Ok();
}

void PoolImpl::BackgroundLoop() {
  const auto period = std::chrono::nanoseconds(std::max<Nanos>(geometry_.lease / 4, 1000));
  std::unique_lock<std::mutex> g(bg_mu_);
  while (!bg_cv_.wait_for(g, period, [this] { return bg_stop_; })) {
    g.unlock();
    Status s = Tick();
    if (!s.ok()) log::Warn("pool background tick: {}", s.ToString());
    g.lock();
  }
}

}  // namespace dualpath::pool
