// MasterState: membership, LRU lists and eviction, node reports, observers and the consistency
// check. Puts, reads and time are in master_state.cc.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "dualpath/common/check.h"
#include "store/master_impl.h"

namespace dualpath::store {

namespace {

std::string NodeText(NodeId node) { return "node " + std::to_string(node.value()); }

Status CheckTierSpec(NodeId node, std::string_view tier, const TierSpec& spec) {
  if (spec.capacity == 0) return Status::Ok();
  // Written so that NaN fails too.
  if (!(spec.low_watermark > 0 && spec.low_watermark <= spec.high_watermark &&
        spec.high_watermark <= 1)) {
    return InvalidArgument(NodeText(node) + " " + std::string(tier) + ": watermarks low " +
                           std::to_string(spec.low_watermark) + " high " +
                           std::to_string(spec.high_watermark) +
                           " must satisfy 0 < low <= high <= 1");
  }
  return Status::Ok();
}

}  // namespace

TierState& MasterState::Impl::TierOf(NodeId node, Tier tier) {
  auto it = nodes_.find(node);
  DUALPATH_CHECK(it != nodes_.end(), "store master: a replica on a node that is not live");
  return it->second.tier(tier);
}

// ---------------------------------------------------------------------------------------------
// Membership.

Status MasterState::Impl::AddNode(const NodeSpec& spec) {
  if (nodes_.contains(spec.id)) {
    return Status(Code::kStoreNodeExists, "add " + NodeText(spec.id) + ": already live");
  }
  const uint64_t a = config_.alignment;
  const uint64_t dram = spec.dram.capacity & ~(a - 1);
  const uint64_t ssd = spec.ssd.capacity & ~(a - 1);
  if (dram == 0 && ssd == 0) {
    return InvalidArgument("add " + NodeText(spec.id) + ": no tier (dram capacity " +
                           std::to_string(spec.dram.capacity) + ", ssd capacity " +
                           std::to_string(spec.ssd.capacity) + "; each must be 0 or at least " +
                           std::to_string(a) + " bytes)");
  }
  if (dram >= kMaxTierBytes || ssd >= kMaxTierBytes) {
    return InvalidArgument("add " + NodeText(spec.id) + ": a tier of " +
                           std::to_string(std::max(dram, ssd)) +
                           " bytes; the master accounts tiers below 2^48 bytes (256 TiB)");
  }
  RETURN_IF_ERROR(CheckTierSpec(spec.id, "dram", spec.dram));
  RETURN_IF_ERROR(CheckTierSpec(spec.id, "ssd", spec.ssd));
  NodeState node;
  auto init = [](TierState& ts, uint64_t capacity, const TierSpec& s) {
    ts.alloc = ExtentAllocator(capacity);
    ts.high_bytes =
        static_cast<uint64_t>(std::llround(s.high_watermark * static_cast<double>(capacity)));
    ts.low_bytes =
        static_cast<uint64_t>(std::llround(s.low_watermark * static_cast<double>(capacity)));
  };
  init(node.tier(Tier::kDram), dram, spec.dram);
  init(node.tier(Tier::kSsd), ssd, spec.ssd);
  nodes_.emplace(spec.id, std::move(node));
  return Status::Ok();
}

Status MasterState::Impl::RemoveNode(NodeId node) {
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) {
    return Status(Code::kStoreUnknownNode, "remove " + NodeText(node) + ": not live");
  }
  // Committed objects with a replica here: their LRU lists name them all.
  std::vector<ObjIndex> committed;
  for (TierState& ts : nit->second.tiers) {
    for (ObjIndex o = ts.lru.head; o != kNoObject; o = SlotOn(o, node)->lru_next) {
      committed.push_back(o);
    }
  }
  for (ObjIndex o : committed) {
    // The node's space goes with the node: unlink only, nothing to free.
    DropReplica(o, node, /*free_space=*/false);
    if (Obj(o).num_replicas == 0) {
      if (Obj(o).pins > 0) {
        HideObject(o);  // readers holding it will find the node dead and miss
      } else {
        FreeObject(o, /*indexed=*/true);
      }
    }
  }
  std::vector<uint64_t> dead_puts;
  for (auto& [id, put] : puts_) {
    const ObjIndex o = put.object;
    if (SlotOn(o, node) == nullptr) continue;
    DropSlot(o, node);
    if (Obj(o).num_replicas == 0) dead_puts.push_back(id);
  }
  for (uint64_t id : dead_puts) ErasePut(id);  // nothing left to commit to
  for (ObjIndex o : hidden_) {
    if (SlotOn(o, node) != nullptr) DropSlot(o, node);
  }
  nodes_.erase(nit);
  return Status::Ok();
}

std::vector<NodeId> MasterState::Impl::LiveNodes() const {
  std::vector<NodeId> out;
  out.reserve(nodes_.size());
  for (const auto& [id, node] : nodes_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Objects, LRU lists and eviction.

void MasterState::Impl::DropReplica(ObjIndex o, NodeId node, bool free_space) {
  ReplicaSlot* s = SlotOn(o, node);
  DUALPATH_CHECK(s != nullptr, "store master: DropReplica on a node without a replica");
  TierState& ts = TierOf(node, s->tier);
  if (Obj(o).st() == ObjectState::kCommitted) LruUnlink(ts.lru, node, o);
  if (free_space) ts.alloc.Free(s->offset(), Aligned(Obj(o).size));
  ts.replicas--;
  DropSlot(o, node);
}

void MasterState::Impl::EraseObject(ObjIndex o) {
  DUALPATH_CHECK(Obj(o).pins == 0, "store master: erasing a pinned object");
  while (Obj(o).num_replicas > 0) DropReplica(o, SlotAt(o, 0).node_id(), /*free_space=*/true);
  FreeObject(o, /*indexed=*/true);
}

void MasterState::Impl::HideObject(ObjIndex o) {
  if (Obj(o).st() == ObjectState::kCommitted) {
    for (int r = 0; r < static_cast<int>(Obj(o).num_replicas); ++r) {
      const ReplicaSlot& s = SlotAt(o, r);
      LruUnlink(TierOf(s.node_id(), s.tier).lru, s.node_id(), o);
    }
  }
  Obj(o).set_state(ObjectState::kHidden);
  Unindex(o);
  hidden_.insert(o);
}

bool MasterState::Impl::EvictOne(NodeId node, Tier tier) {
  if (clock_.Now() < hold_eviction_until_) return false;
  TierState& ts = TierOf(node, tier);
  ObjIndex o = ts.lru.head;
  while (o != kNoObject && Obj(o).pins > 0) o = SlotOn(o, node)->lru_next;
  if (o == kNoObject) return false;
  DropReplica(o, node, /*free_space=*/true);
  // Its last copy: the object is gone.
  if (Obj(o).num_replicas == 0) FreeObject(o, /*indexed=*/true);
  evicted_replicas_++;
  return true;
}

size_t MasterState::Impl::EvictToWatermark(NodeId node, Tier tier) {
  TierState& ts = TierOf(node, tier);
  size_t n = 0;
  if (ts.alloc.used() <= ts.high_bytes) return 0;
  while (ts.alloc.used() > ts.low_bytes && EvictOne(node, tier)) n++;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reports from nodes (a new leader rebuilding its metadata).

Result<RebuildOutcome> MasterState::Impl::RebuildFromReports(
    NodeId node, std::span<const ReportedReplica> reports) {
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) {
    return Status(Code::kStoreUnknownNode, "reports of " + NodeText(node) + ": not live");
  }
  RebuildOutcome out;
  for (const ReportedReplica& r : reports) {
    const std::string what = "report of " + NodeText(node) + " for object " + r.key.ShortString();
    auto reject = [&](Code code, const std::string& why) {
      out.rejected.emplace_back(r.key, Status(code, what + ": " + why));
    };
    if (!IsValidTier(r.tier)) {
      reject(Code::kInvalidArgument, "tier " + std::to_string(static_cast<int>(r.tier)));
      continue;
    }
    TierState& ts = nit->second.tier(r.tier);
    if (r.size == 0) {
      reject(Code::kInvalidArgument, "size 0");
      continue;
    }
    if (ts.alloc.capacity() == 0) {
      reject(Code::kInvalidArgument, "the node has no " + std::string(TierName(r.tier)) + " tier");
      continue;
    }
    if (r.offset % config_.alignment != 0 || r.size > ts.alloc.capacity()) {
      reject(Code::kInvalidArgument, "offset " + std::to_string(r.offset) + " size " +
                                         std::to_string(r.size) + " not aligned to " +
                                         std::to_string(config_.alignment) + " or past capacity " +
                                         std::to_string(ts.alloc.capacity()));
      continue;
    }
    ObjIndex o = Find(r.key);
    if (o != kNoObject) {
      const Object& obj = Obj(o);
      if (obj.st() != ObjectState::kCommitted) {
        reject(Code::kStoreReportConflict, "a put of it is in progress");
        continue;
      }
      if (obj.size != r.size || obj.put_or_checksum != r.checksum) {
        reject(Code::kStoreReportConflict,
               "size " + std::to_string(r.size) + " checksum " + std::to_string(r.checksum) +
                   " differ from the known size " + std::to_string(obj.size) + " checksum " +
                   std::to_string(obj.put_or_checksum));
        continue;
      }
      if (SlotOn(o, node) != nullptr) {
        reject(Code::kStoreReportConflict, "reported twice by the node");
        continue;
      }
      if (obj.num_replicas == kMaxReplicas) {
        reject(Code::kStoreReportConflict,
               "already has " + std::to_string(kMaxReplicas) + " replicas");
        continue;
      }
    }
    if (!ts.alloc.AllocateAt(r.offset, Aligned(r.size))) {
      reject(Code::kStoreReportConflict, "bytes " + std::to_string(r.offset) + " +" +
                                             std::to_string(Aligned(r.size)) +
                                             " overlap another replica or run past capacity");
      continue;
    }
    if (o == kNoObject) {
      o = NewObject(r.key);
      if (o == kNoObject) {
        ts.alloc.Free(r.offset, Aligned(r.size));
        reject(Code::kResourceExhausted, "the master holds 2^32 - 1 objects, its limit");
        continue;
      }
      Obj(o).size = r.size;
      Obj(o).put_or_checksum = r.checksum;
      Obj(o).set_state(ObjectState::kCommitted);
    }
    AddSlot(o, node, r.tier, r.offset);
    ts.replicas++;
    LruAppend(ts.lru, node, o);
    out.accepted++;
  }
  for (int t = 0; t < kNumTiers; ++t) {
    if (nit->second.tiers[t].alloc.capacity() > 0) EvictToWatermark(node, static_cast<Tier>(t));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Observers.

Result<TierUsage> MasterState::Impl::Usage(NodeId node, Tier tier) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    return Status(Code::kStoreUnknownNode, "usage of " + NodeText(node) + ": not live");
  }
  if (!IsValidTier(tier)) {
    return InvalidArgument("usage of " + NodeText(node) + ": tier " +
                           std::to_string(static_cast<int>(tier)));
  }
  const TierState& ts = it->second.tier(tier);
  return TierUsage{ts.alloc.capacity(), ts.alloc.used(), ts.replicas};
}

MasterStats MasterState::Impl::Stats() const {
  MasterStats s;
  s.nodes = nodes_.size();
  s.objects = index_.size() - puts_.size();
  s.pending_puts = puts_.size();
  s.pins = pins_.size();
  s.hidden_pinned = hidden_.size();
  s.evicted_replicas = evicted_replicas_;
  s.expired_puts = expired_puts_;
  s.expired_pins = expired_pins_;
  return s;
}

Status MasterState::Impl::CheckConsistency() const {
  // Expected (used bytes, replicas) per (node, tier) from the objects themselves.
  std::map<std::pair<NodeId, int>, std::pair<uint64_t, uint64_t>> expect;
  std::map<std::pair<NodeId, int>, uint64_t> committed_slots;
  auto account = [&](ObjIndex oi) -> Status {
    const Object& o = Obj(oi);
    const std::string name = KeyOf(oi).ShortString();
    if (o.num_replicas > kMaxReplicas) return Internal("object " + name + ": replica count");
    if ((o.num_replicas > 1) != (o.extra != kNoObject)) {
      return Internal("object " + name + ": out-of-line replica slots");
    }
    for (int i = 0; i < static_cast<int>(o.num_replicas); ++i) {
      const ReplicaSlot& s = SlotAt(oi, i);
      if (!nodes_.contains(s.node_id())) {
        return Internal("object " + name + " has a replica on dead " + NodeText(s.node_id()));
      }
      for (int j = 0; j < i; ++j) {
        if (SlotAt(oi, j).node == s.node) {
          return Internal("object " + name + " has two replicas on " + NodeText(s.node_id()));
        }
      }
      auto& e = expect[{s.node_id(), static_cast<int>(s.tier)}];
      e.first += Aligned(o.size);
      e.second++;
      if (o.st() == ObjectState::kCommitted) {
        committed_slots[{s.node_id(), static_cast<int>(s.tier)}]++;
      }
    }
    return Status::Ok();
  };
  std::unordered_map<ObjIndex, uint32_t> pin_refs;
  for (const auto& [id, pin] : pins_) {
    if (!pin_expiry_.contains({pin.expires_at, id})) return Internal("pin without expiry entry");
    for (ObjIndex o : pin.objects) pin_refs[o]++;
  }
  if (pin_expiry_.size() != pins_.size()) return Internal("pin expiry entries without pins");
  // Every indexed object is found by its own key (the table's probing and erase are sound).
  size_t pending = 0, indexed = 0;
  Status bad;
  std::vector<uint64_t> per_model(models_.size(), 0);
  index_.ForEach([&](ObjIndex oi) {
    if (!bad.ok()) return;
    indexed++;
    const Object& o = Obj(oi);
    const ObjectKey key = KeyOf(oi);
    const std::string name = key.ShortString();
    if (o.model >= models_.size() || models_[o.model].second == 0) {
      bad = Internal("object " + name + ": model slot");
      return;
    }
    per_model[o.model]++;
    if (Find(key) != oi) {
      bad = Internal("object " + name + ": not found by its key");
    } else if (o.st() != ObjectState::kPending && o.st() != ObjectState::kCommitted) {
      bad = Internal("object " + name + ": state " + std::to_string(o.state) + " in the index");
    } else if (o.num_replicas == 0) {
      bad = Internal("object " + name + " has no replica");
    } else if (o.pins != pin_refs[oi]) {
      bad = Internal("object " + name + ": pin count");
    } else if (o.st() == ObjectState::kPending) {
      pending++;
      auto p = puts_.find(o.put_or_checksum);
      if (p == puts_.end() || p->second.object != oi) {
        bad = Internal("pending object " + name + " without its put");
      } else if (o.pins != 0) {
        bad = Internal("pending object is pinned");
      }
    }
    if (bad.ok()) bad = account(oi);
  });
  RETURN_IF_ERROR(bad);
  if (indexed != index_.size()) return Internal("object index size disagrees with its entries");
  if (pending != puts_.size() || put_deadlines_.size() != puts_.size()) {
    return Internal("puts, deadlines and pending objects disagree");
  }
  for (ObjIndex o : hidden_) {
    const Object& obj = Obj(o);
    if (obj.st() != ObjectState::kHidden || obj.pins == 0 || obj.pins != pin_refs[o]) {
      return Internal("hidden object " + KeyOf(o).ShortString() + " state or pins");
    }
    per_model[obj.model]++;
    RETURN_IF_ERROR(account(o));
  }
  for (size_t m = 0; m < models_.size(); ++m) {
    if (per_model[m] != models_[m].second) {
      return Internal("model slot " + std::to_string(m) + " counts " +
                      std::to_string(models_[m].second) + " objects, " +
                      std::to_string(per_model[m]) + " hold it");
    }
  }
  // Records: every one is live (indexed or hidden) or on the free list.
  size_t free_records = 0;
  for (ObjIndex f = free_head_; f != kNoObject; f = Obj(f).extra) {
    if (Obj(f).st() != ObjectState::kFree || ++free_records > allocated_) {
      return Internal("object free list broken");
    }
  }
  if (free_records + index_.size() + hidden_.size() != allocated_) {
    return Internal("object records: " + std::to_string(allocated_) + " allocated, " +
                    std::to_string(free_records) + " free, " + std::to_string(index_.size()) +
                    " indexed, " + std::to_string(hidden_.size()) + " hidden");
  }
  for (const auto& [id, node] : nodes_) {
    for (int t = 0; t < kNumTiers; ++t) {
      const TierState& ts = node.tiers[t];
      auto e = expect[{id, t}];
      if (ts.alloc.used() != e.first || ts.replicas != e.second) {
        return Internal(NodeText(id) + " " + std::string(TierName(static_cast<Tier>(t))) +
                        ": used " + std::to_string(ts.alloc.used()) + " replicas " +
                        std::to_string(ts.replicas) + ", objects account for " +
                        std::to_string(e.first) + " and " + std::to_string(e.second));
      }
      uint64_t listed = 0;
      ObjIndex prev = kNoObject;
      for (ObjIndex o = ts.lru.head; o != kNoObject;) {
        const ReplicaSlot* s = const_cast<Impl*>(this)->SlotOn(o, id);
        if (s == nullptr || Obj(o).st() != ObjectState::kCommitted || s->lru_prev != prev ||
            static_cast<int>(s->tier) != t || listed > allocated_) {
          return Internal(NodeText(id) + ": LRU list broken at " + KeyOf(o).ShortString());
        }
        listed++;
        prev = o;
        o = s->lru_next;
      }
      if (prev != ts.lru.tail || listed != committed_slots[{id, t}]) {
        return Internal(NodeText(id) + ": LRU list holds " + std::to_string(listed) + " of " +
                        std::to_string(committed_slots[{id, t}]) + " committed replicas");
      }
    }
  }
  return Status::Ok();
}

}  // namespace dualpath::store
