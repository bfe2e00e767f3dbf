// MasterState: the public wrappers (locking), puts, reads and time. Membership, eviction, reports
// and the consistency check are in master_nodes.cc.
#include "dualpath/store/master_state.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "dualpath/common/check.h"
#include "store/master_impl.h"

namespace dualpath::store {

namespace {

std::string KeyText(const ObjectKey& key) { return "object " + key.ShortString(); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public wrappers: one lock per call.

Result<std::unique_ptr<MasterState>> MasterState::Create(const MasterConfig& config,
                                                         const Clock& clock) {
  if (config.put_timeout <= 0) {
    return InvalidArgument("store master: put_timeout " + std::to_string(config.put_timeout) +
                           " ns must be > 0");
  }
  if (config.pin_ttl <= 0) {
    return InvalidArgument("store master: pin_ttl " + std::to_string(config.pin_ttl) +
                           " ns must be > 0");
  }
  const uint64_t a = config.alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > (uint64_t{1} << 20)) {
    return InvalidArgument("store master: alignment " + std::to_string(a) +
                           " must be a power of two in 1 .. 1048576");
  }
  return std::unique_ptr<MasterState>(new MasterState(std::make_unique<Impl>(config, clock)));
}

MasterState::MasterState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MasterState::~MasterState() = default;

Status MasterState::AddNode(const NodeSpec& spec) {
  std::lock_guard lock(impl_->mu_);
  return impl_->AddNode(spec);
}
Status MasterState::RemoveNode(NodeId node) {
  std::lock_guard lock(impl_->mu_);
  return impl_->RemoveNode(node);
}
std::vector<NodeId> MasterState::LiveNodes() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->LiveNodes();
}
Result<PutTicket> MasterState::PutStart(const ObjectKey& key, uint64_t size,
                                        const PutOptions& options) {
  std::lock_guard lock(impl_->mu_);
  return impl_->PutStart(key, size, options);
}
Status MasterState::PutCommit(PutId put, uint64_t checksum) {
  std::lock_guard lock(impl_->mu_);
  return impl_->PutCommit(put, checksum);
}
Status MasterState::PutAbort(PutId put) {
  std::lock_guard lock(impl_->mu_);
  return impl_->PutAbort(put);
}
GetResult MasterState::Get(std::span<const ObjectKey> keys) {
  std::lock_guard lock(impl_->mu_);
  return impl_->Get(keys);
}
Status MasterState::Unpin(PinId pin) {
  std::lock_guard lock(impl_->mu_);
  return impl_->Unpin(pin);
}
Result<Nanos> MasterState::RenewPin(PinId pin) {
  std::lock_guard lock(impl_->mu_);
  return impl_->RenewPin(pin);
}
ExistsResult MasterState::Exists(std::span<const ObjectKey> keys) const {
  std::lock_guard lock(impl_->mu_);
  return impl_->Exists(keys);
}
size_t MasterState::Remove(std::span<const ObjectKey> keys) {
  std::lock_guard lock(impl_->mu_);
  return impl_->Remove(keys);
}
TickStats MasterState::Tick() {
  std::lock_guard lock(impl_->mu_);
  return impl_->Tick();
}
Result<RebuildOutcome> MasterState::RebuildFromReports(NodeId node,
                                                       std::span<const ReportedReplica> reports) {
  std::lock_guard lock(impl_->mu_);
  return impl_->RebuildFromReports(node, reports);
}
void MasterState::HoldEviction(Nanos until) {
  std::lock_guard lock(impl_->mu_);
  impl_->HoldEviction(until);
}
Result<TierUsage> MasterState::Usage(NodeId node, Tier tier) const {
  std::lock_guard lock(impl_->mu_);
  return impl_->Usage(node, tier);
}
MasterStats MasterState::Stats() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->Stats();
}
Status MasterState::CheckConsistency() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->CheckConsistency();
}

// ---------------------------------------------------------------------------------------------
// Puts.

Result<PutTicket> MasterState::Impl::PutStart(const ObjectKey& key, uint64_t size,
                                              const PutOptions& options) {
  if (options.replicas < 1 || options.replicas > kMaxReplicas) {
    return InvalidArgument("put " + KeyText(key) + ": replicas " +
                           std::to_string(options.replicas) + " out of range 1.." +
                           std::to_string(kMaxReplicas));
  }
  if (!IsValidTier(options.tier)) {
    return InvalidArgument("put " + KeyText(key) + ": tier " +
                           std::to_string(static_cast<int>(options.tier)) + " is not dram or ssd");
  }
  if (size == 0) {
    return InvalidArgument("put " + KeyText(key) + ": size 0");
  }
  const std::string_view tier_name = TierName(options.tier);
  if (const ObjIndex i = Find(key); i != kNoObject) {
    const Object& o = Obj(i);
    if (o.st() == ObjectState::kCommitted) {
      return Status(Code::kStoreObjectExists, "put " + KeyText(key) + ": already committed");
    }
    return Status(Code::kStorePutPending, "put " + KeyText(key) + ": put " +
                                              std::to_string(o.put_or_checksum) +
                                              " of it is in progress");
  }

  // Candidates: live nodes with this tier. Bad sizes are named against the largest of them.
  struct Candidate {
    NodeId id;
    TierState* tier;
  };
  std::vector<Candidate> candidates;
  uint64_t max_capacity = 0;
  for (auto& [id, node] : nodes_) {
    TierState& ts = node.tier(options.tier);
    if (ts.alloc.capacity() > 0) {
      candidates.push_back({id, &ts});
      max_capacity = std::max(max_capacity, ts.alloc.capacity());
    }
  }
  if (static_cast<int>(candidates.size()) < options.replicas) {
    return Status(Code::kStoreNotEnoughNodes,
                  "put " + KeyText(key) + ": " + std::to_string(options.replicas) +
                      " replicas asked, only " + std::to_string(candidates.size()) +
                      " live nodes have a " + std::string(tier_name) + " tier");
  }
  if (size > max_capacity) {
    return InvalidArgument("put " + KeyText(key) + ": size " + std::to_string(size) +
                           " exceeds the largest " + std::string(tier_name) +
                           " tier of a live node (" + std::to_string(max_capacity) + " bytes)");
  }
  const uint64_t need = Aligned(size);
  std::erase_if(candidates, [&](const Candidate& c) { return c.tier->alloc.capacity() < need; });
  if (static_cast<int>(candidates.size()) < options.replicas) {
    return Status(Code::kStoreNotEnoughNodes,
                  "put " + KeyText(key) + ": " + std::to_string(options.replicas) +
                      " replicas asked, only " + std::to_string(candidates.size()) +
                      " live nodes have a " + std::string(tier_name) + " tier of at least " +
                      std::to_string(need) + " bytes");
  }
  // Placement order: the preferred node, then the most free space (ties: lower id).
  std::sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
    const bool pa = options.preferred_node == a.id;
    const bool pb = options.preferred_node == b.id;
    if (pa != pb) return pa;
    if (a.tier->alloc.free_bytes() != b.tier->alloc.free_bytes()) {
      return a.tier->alloc.free_bytes() > b.tier->alloc.free_bytes();
    }
    return a.id < b.id;
  });

  // Pass 1 takes free space in placement order; pass 2 evicts (LRU, unpinned) on the remaining
  // candidates for what is still missing, so a put spills to a node with room before it evicts.
  std::vector<std::pair<size_t, uint64_t>> placed;  // (candidate index, offset)
  std::vector<bool> used(candidates.size(), false);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (static_cast<int>(placed.size()) == options.replicas) break;
      if (used[i]) continue;
      std::optional<uint64_t> off = candidates[i].tier->alloc.Allocate(need);
      while (!off && pass == 1 && EvictOne(candidates[i].id, options.tier)) {
        off = candidates[i].tier->alloc.Allocate(need);
      }
      if (off) {
        placed.emplace_back(i, *off);
        used[i] = true;
      }
    }
  }
  if (static_cast<int>(placed.size()) < options.replicas) {
    for (const auto& [i, off] : placed) candidates[i].tier->alloc.Free(off, need);
    return Status(Code::kStoreNoSpace,
                  "put " + KeyText(key) + ": " + std::to_string(need) + " bytes of " +
                      std::string(tier_name) + " found on " + std::to_string(placed.size()) +
                      " of the " + std::to_string(options.replicas) +
                      " nodes asked, even after evicting every unpinned object there");
  }

  const ObjIndex oi = NewObject(key);
  if (oi == kNoObject) {
    for (const auto& [i, off] : placed) candidates[i].tier->alloc.Free(off, need);
    return Status(Code::kResourceExhausted,
                  "put " + KeyText(key) + ": the master holds 2^32 - 1 objects, its limit");
  }
  const uint64_t put_id = next_put_id_++;
  Obj(oi).size = size;
  Obj(oi).put_or_checksum = put_id;
  PutTicket ticket;
  ticket.id = PutId(put_id);
  ticket.deadline = clock_.Now() + config_.put_timeout;
  for (const auto& [i, off] : placed) {
    AddSlot(oi, candidates[i].id, options.tier, off);
    candidates[i].tier->replicas++;
    ticket.locations.push_back(Replica{candidates[i].id, options.tier, off, size, 0});
  }
  puts_.emplace(put_id, PendingPut{oi, ticket.deadline});
  put_deadlines_.emplace(ticket.deadline, put_id);
  // A reservation counts as used: keep each node under its watermark (the new object is not in
  // any LRU list, so it cannot be the one evicted).
  for (const Replica& r : ticket.locations) EvictToWatermark(r.node, r.tier);
  return ticket;
}

Status MasterState::Impl::PutCommit(PutId put, uint64_t checksum) {
  auto it = puts_.find(put.value());
  if (it == puts_.end()) {
    return Status(Code::kStoreUnknownPut,
                  "commit of put " + std::to_string(put.value()) +
                      ": not in progress (never started, committed, aborted or expired)");
  }
  const ObjIndex o = it->second.object;
  put_deadlines_.erase({it->second.deadline, put.value()});
  puts_.erase(it);
  Obj(o).set_state(ObjectState::kCommitted);
  Obj(o).put_or_checksum = checksum;
  std::array<std::pair<NodeId, Tier>, kMaxReplicas> where;
  const int n = static_cast<int>(Obj(o).num_replicas);
  for (int r = 0; r < n; ++r) {
    const ReplicaSlot& s = SlotAt(o, r);
    where[r] = {s.node_id(), s.tier};
    LruAppend(TierOf(s.node_id(), s.tier).lru, s.node_id(), o);
  }
  // `o` may be evicted here (it is the most recent, so only if nothing older can go): do not
  // touch it after this loop.
  for (int r = 0; r < n; ++r) EvictToWatermark(where[r].first, where[r].second);
  return Status::Ok();
}

Status MasterState::Impl::PutAbort(PutId put) {
  auto it = puts_.find(put.value());
  if (it == puts_.end()) {
    return Status(Code::kStoreUnknownPut,
                  "abort of put " + std::to_string(put.value()) +
                      ": not in progress (never started, committed, aborted or expired)");
  }
  ErasePut(put.value());
  return Status::Ok();
}

void MasterState::Impl::ErasePut(uint64_t put_id) {
  auto it = puts_.find(put_id);
  DUALPATH_CHECK(it != puts_.end(), "store master: ErasePut of an unknown put");
  const ObjIndex o = it->second.object;
  put_deadlines_.erase({it->second.deadline, put_id});
  puts_.erase(it);
  EraseObject(o);
}

// ---------------------------------------------------------------------------------------------
// Reads.

GetResult MasterState::Impl::Get(std::span<const ObjectKey> keys) {
  GetResult out;
  out.objects.resize(keys.size());
  Pin pin;
  for (size_t i = 0; i < keys.size(); ++i) {
    const ObjIndex o = Find(keys[i]);
    if (o == kNoObject || Obj(o).st() != ObjectState::kCommitted) continue;
    const Object& obj = Obj(o);
    ObjectInfo& info = out.objects[i];
    info.found = true;
    info.size = obj.size;
    info.checksum = obj.put_or_checksum;
    info.replicas.reserve(obj.num_replicas);
    for (int r = 0; r < static_cast<int>(obj.num_replicas); ++r) {
      const ReplicaSlot& s = SlotAt(o, r);
      info.replicas.push_back(Replica{s.node_id(), s.tier, s.offset(), info.size, info.checksum});
    }
    Obj(o).pins++;
    pin.objects.push_back(o);
    Touch(o);
  }
  if (!pin.objects.empty()) {
    const uint64_t id = next_pin_id_++;
    pin.expires_at = clock_.Now() + config_.pin_ttl;
    out.pin = PinId(id);
    out.pin_expires_at = pin.expires_at;
    pin_expiry_.emplace(pin.expires_at, id);
    pins_.emplace(id, std::move(pin));
  }
  return out;
}

Status MasterState::Impl::Unpin(PinId pin) {
  if (!pins_.contains(pin.value())) {
    return Status(Code::kStoreUnknownPin, "unpin of pin " + std::to_string(pin.value()) +
                                              ": not live (never given, unpinned or expired)");
  }
  ErasePin(pin.value());
  return Status::Ok();
}

Result<Nanos> MasterState::Impl::RenewPin(PinId pin) {
  auto it = pins_.find(pin.value());
  if (it == pins_.end()) {
    return Status(Code::kStoreUnknownPin, "renewal of pin " + std::to_string(pin.value()) +
                                              ": not live (never given, unpinned or expired)");
  }
  pin_expiry_.erase({it->second.expires_at, pin.value()});
  it->second.expires_at = clock_.Now() + config_.pin_ttl;
  pin_expiry_.emplace(it->second.expires_at, pin.value());
  return it->second.expires_at;
}

void MasterState::Impl::ErasePin(uint64_t pin_id) {
  auto it = pins_.find(pin_id);
  DUALPATH_CHECK(it != pins_.end(), "store master: ErasePin of an unknown pin");
  pin_expiry_.erase({it->second.expires_at, pin_id});
  for (ObjIndex o : it->second.objects) ReleasePinRef(o);
  pins_.erase(it);
}

void MasterState::Impl::ReleasePinRef(ObjIndex o) {
  Object& obj = Obj(o);
  DUALPATH_CHECK(obj.pins > 0, "store master: pin count underflow");
  if (--obj.pins > 0 || obj.st() != ObjectState::kHidden) return;
  while (obj.num_replicas > 0) {
    const ReplicaSlot s = SlotAt(o, 0);
    TierState& ts = TierOf(s.node_id(), s.tier);
    ts.alloc.Free(s.offset(), Aligned(obj.size));
    ts.replicas--;
    DropSlot(o, s.node_id());
  }
  hidden_.erase(o);
  FreeObject(o, /*indexed=*/false);
}

ExistsResult MasterState::Impl::Exists(std::span<const ObjectKey> keys) const {
  ExistsResult out;
  out.found.resize(keys.size());
  // A hit costs two dependent cache misses against millions of objects (the table slot, then the
  // record it names) and a miss one; looked up one at a time, a 1,000-key batch waits them out in
  // turn (~150 ns a hit). So the batch is a three-stage pipeline: key i + 2D's slot is prefetched,
  // key i + D's slot (in cache by now) yields its candidate record, which is prefetched, and key i
  // is decided on lines already loaded. Every stage reads only; answers are Find's exactly.
  constexpr size_t kDistance = 8;
  const size_t n = keys.size();
  // Per-key table hash and candidate (a ring of 2D + 1 entries would do; the batch is bounded by
  // kMaxBatchKeys, and a vector per call is one allocation).
  std::vector<std::pair<uint64_t, ObjIndex>> probe(n);
  // Nearly every batch names one model: its fingerprint is looked up once, not per key.
  uint64_t last_fp = 0;
  uint32_t last_model = 0;
  bool last_known = false, have_last = false;
  auto model_of = [&](uint64_t fp, uint32_t* model) {
    if (!have_last || fp != last_fp) {
      auto m = model_index_.find(fp);
      have_last = true;
      last_fp = fp;
      last_known = m != model_index_.end();
      if (last_known) last_model = m->second;
    }
    *model = last_model;
    return last_known;
  };
  auto stage_prefetch = [&](size_t j) {
    probe[j].first = HashOf(keys[j]);
    index_.Prefetch(probe[j].first);
  };
  auto stage_candidate = [&](size_t j) {
    const ObjIndex c = index_.Candidate(probe[j].first);
    probe[j].second = c;
    if (c != kNoObject) {
      // Only the bytes the decision reads (Object: hash, state, model first); they straddle two
      // lines for half the records, where the whole 80-byte record always does.
      const char* rec = reinterpret_cast<const char*>(&Obj(c));
      __builtin_prefetch(rec);
      __builtin_prefetch(rec + kLookupBytes - 1);
    }
  };
  for (size_t j = 0; j < std::min(n, 2 * kDistance); ++j) stage_prefetch(j);
  for (size_t j = 0; j < std::min(n, kDistance); ++j) stage_candidate(j);
  bool prefix = true;
  for (size_t i = 0; i < n; ++i) {
    if (i + 2 * kDistance < n) stage_prefetch(i + 2 * kDistance);
    if (i + kDistance < n) stage_candidate(i + kDistance);
    const ObjectKey& key = keys[i];
    uint32_t model = 0;
    ObjIndex o = kNoObject;
    const ObjIndex c = probe[i].second;
    if (c != kNoObject && model_of(key.model_fingerprint, &model)) {
      const Object& rec = Obj(c);
      // The candidate is the key's record, or a tag collision: then Find probes on past it.
      o = rec.model == model && rec.hash == key.hash ? c : Find(key);
    }
    const bool hit = o != kNoObject && Obj(o).st() == ObjectState::kCommitted;
    out.found[i] = hit ? 1 : 0;
    prefix = prefix && hit;
    out.prefix_hits += prefix ? 1 : 0;
  }
  return out;
}

size_t MasterState::Impl::Remove(std::span<const ObjectKey> keys) {
  size_t removed = 0;
  for (const ObjectKey& key : keys) {
    const ObjIndex o = Find(key);
    if (o == kNoObject || Obj(o).st() != ObjectState::kCommitted) continue;
    if (Obj(o).pins > 0) {
      HideObject(o);
    } else {
      EraseObject(o);
    }
    removed++;
  }
  return removed;
}

// ---------------------------------------------------------------------------------------------
// Time.

TickStats MasterState::Impl::Tick() {
  const Nanos now = clock_.Now();
  TickStats stats;
  while (!put_deadlines_.empty() && put_deadlines_.begin()->first <= now) {
    ErasePut(put_deadlines_.begin()->second);
    stats.expired_puts++;
  }
  while (!pin_expiry_.empty() && pin_expiry_.begin()->first <= now) {
    ErasePin(pin_expiry_.begin()->second);
    stats.expired_pins++;
  }
  // Expired pins may have unblocked eviction anywhere.
  for (auto& [id, node] : nodes_) {
    for (int t = 0; t < kNumTiers; ++t) {
      if (node.tiers[t].alloc.capacity() > 0) {
        stats.evicted_replicas += EvictToWatermark(id, static_cast<Tier>(t));
      }
    }
  }
  expired_puts_ += stats.expired_puts;
  expired_pins_ += stats.expired_pins;
  return stats;
}

}  // namespace dualpath::store
