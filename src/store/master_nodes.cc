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

void Object::DropSlot(NodeId node) {
  for (uint8_t i = 0; i < num_replicas; ++i) {
    if (replicas[i].node == node) {
      for (uint8_t j = i; j + 1 < num_replicas; ++j) replicas[j] = replicas[j + 1];
      num_replicas--;
      return;
    }
  }
  DUALPATH_FATAL("store master: DropSlot of a node the object has no replica on");
}

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
  std::vector<Object*> committed;
  for (TierState& ts : nit->second.tiers) {
    for (Object* o = ts.lru.head; o != nullptr; o = o->SlotOn(node)->lru_next) {
      committed.push_back(o);
    }
  }
  for (Object* o : committed) {
    // The node's space goes with the node: unlink only, nothing to free.
    DropReplica(o, node, /*free_space=*/false);
    if (o->num_replicas == 0) {
      if (o->pins > 0) {
        HideObject(o);  // readers holding it will find the node dead and miss
      } else {
        objects_.erase(*o->key);
      }
    }
  }
  std::vector<uint64_t> dead_puts;
  for (auto& [id, put] : puts_) {
    Object* o = put.object;
    if (o->SlotOn(node) == nullptr) continue;
    o->DropSlot(node);
    if (o->num_replicas == 0) dead_puts.push_back(id);
  }
  for (uint64_t id : dead_puts) ErasePut(id);  // nothing left to commit to
  for (auto& [o, handle] : hidden_) {
    if (o->SlotOn(node) != nullptr) o->DropSlot(node);
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

void MasterState::Impl::LruAppend(LruList& list, NodeId node, Object* o) {
  ReplicaSlot* s = o->SlotOn(node);
  s->lru_prev = list.tail;
  s->lru_next = nullptr;
  if (list.tail != nullptr) {
    list.tail->SlotOn(node)->lru_next = o;
  } else {
    list.head = o;
  }
  list.tail = o;
}

void MasterState::Impl::LruUnlink(LruList& list, NodeId node, Object* o) {
  ReplicaSlot* s = o->SlotOn(node);
  if (s->lru_prev != nullptr) {
    s->lru_prev->SlotOn(node)->lru_next = s->lru_next;
  } else {
    list.head = s->lru_next;
  }
  if (s->lru_next != nullptr) {
    s->lru_next->SlotOn(node)->lru_prev = s->lru_prev;
  } else {
    list.tail = s->lru_prev;
  }
  s->lru_prev = s->lru_next = nullptr;
}

void MasterState::Impl::Touch(Object* o) {
  for (uint8_t i = 0; i < o->num_replicas; ++i) {
    const NodeId node = o->replicas[i].node;
    LruList& list = TierOf(node, o->replicas[i].tier).lru;
    if (list.tail == o) continue;
    LruUnlink(list, node, o);
    LruAppend(list, node, o);
  }
}

void MasterState::Impl::DropReplica(Object* o, NodeId node, bool free_space) {
  ReplicaSlot* s = o->SlotOn(node);
  DUALPATH_CHECK(s != nullptr, "store master: DropReplica on a node without a replica");
  TierState& ts = TierOf(node, s->tier);
  if (o->state == ObjectState::kCommitted) LruUnlink(ts.lru, node, o);
  if (free_space) ts.alloc.Free(s->offset, Aligned(o->size));
  ts.replicas--;
  o->DropSlot(node);
}

void MasterState::Impl::EraseObject(Object* o) {
  DUALPATH_CHECK(o->pins == 0, "store master: erasing a pinned object");
  while (o->num_replicas > 0) DropReplica(o, o->replicas[0].node, /*free_space=*/true);
  objects_.erase(*o->key);
}

void MasterState::Impl::HideObject(Object* o) {
  if (o->state == ObjectState::kCommitted) {
    for (uint8_t i = 0; i < o->num_replicas; ++i) {
      const ReplicaSlot& s = o->replicas[i];
      LruUnlink(TierOf(s.node, s.tier).lru, s.node, o);
    }
  }
  o->state = ObjectState::kHidden;
  ObjectMap::node_type handle = objects_.extract(*o->key);
  DUALPATH_CHECK(!handle.empty(), "store master: hiding an object not in the map");
  hidden_.emplace(o, std::move(handle));
}

bool MasterState::Impl::EvictOne(NodeId node, Tier tier) {
  if (clock_.Now() < hold_eviction_until_) return false;
  TierState& ts = TierOf(node, tier);
  Object* o = ts.lru.head;
  while (o != nullptr && o->pins > 0) o = o->SlotOn(node)->lru_next;
  if (o == nullptr) return false;
  DropReplica(o, node, /*free_space=*/true);
  if (o->num_replicas == 0) objects_.erase(*o->key);  // its last copy: the object is gone
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
    auto it = objects_.find(r.key);
    Object* o = it == objects_.end() ? nullptr : &it->second;
    if (o != nullptr) {
      if (o->state != ObjectState::kCommitted) {
        reject(Code::kStoreReportConflict, "a put of it is in progress");
        continue;
      }
      if (o->size != r.size || o->checksum != r.checksum) {
        reject(Code::kStoreReportConflict,
               "size " + std::to_string(r.size) + " checksum " + std::to_string(r.checksum) +
                   " differ from the known size " + std::to_string(o->size) + " checksum " +
                   std::to_string(o->checksum));
        continue;
      }
      if (o->SlotOn(node) != nullptr) {
        reject(Code::kStoreReportConflict, "reported twice by the node");
        continue;
      }
      if (o->num_replicas == kMaxReplicas) {
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
    if (o == nullptr) {
      auto [nit2, inserted] = objects_.try_emplace(r.key);
      o = &nit2->second;
      o->key = &nit2->first;
      o->size = r.size;
      o->checksum = r.checksum;
      o->state = ObjectState::kCommitted;
    }
    ReplicaSlot& s = o->replicas[o->num_replicas++];
    s.node = node;
    s.tier = r.tier;
    s.offset = r.offset;
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
  s.objects = objects_.size() - puts_.size();
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
  auto account = [&](const Object& o) -> Status {
    for (uint8_t i = 0; i < o.num_replicas; ++i) {
      const ReplicaSlot& s = o.replicas[i];
      if (!nodes_.contains(s.node)) {
        return Internal("object " + o.key->ShortString() + " has a replica on dead " +
                        NodeText(s.node));
      }
      for (uint8_t j = 0; j < i; ++j) {
        if (o.replicas[j].node == s.node) {
          return Internal("object " + o.key->ShortString() + " has two replicas on " +
                          NodeText(s.node));
        }
      }
      auto& e = expect[{s.node, static_cast<int>(s.tier)}];
      e.first += Aligned(o.size);
      e.second++;
      if (o.state == ObjectState::kCommitted) committed_slots[{s.node, static_cast<int>(s.tier)}]++;
    }
    return Status::Ok();
  };
  std::unordered_map<const Object*, uint32_t> pin_refs;
  for (const auto& [id, pin] : pins_) {
    if (!pin_expiry_.contains({pin.expires_at, id})) return Internal("pin without expiry entry");
    for (const Object* o : pin.objects) pin_refs[o]++;
  }
  if (pin_expiry_.size() != pins_.size()) return Internal("pin expiry entries without pins");
  size_t pending = 0;
  for (const auto& [key, o] : objects_) {
    if (o.key != &key) return Internal("object " + key.ShortString() + ": key pointer");
    if (o.state == ObjectState::kHidden) return Internal("hidden object in the map");
    if (o.num_replicas == 0) return Internal("object " + key.ShortString() + " has no replica");
    if (o.pins != pin_refs[&o]) return Internal("object " + key.ShortString() + ": pin count");
    if (o.state == ObjectState::kPending) {
      pending++;
      auto p = puts_.find(o.put_id);
      if (p == puts_.end() || p->second.object != &o) {
        return Internal("pending object " + key.ShortString() + " without its put");
      }
      if (o.pins != 0) return Internal("pending object is pinned");
    }
    RETURN_IF_ERROR(account(o));
  }
  if (pending != puts_.size() || put_deadlines_.size() != puts_.size()) {
    return Internal("puts, deadlines and pending objects disagree");
  }
  for (const auto& [o, handle] : hidden_) {
    if (o->state != ObjectState::kHidden || o->pins == 0 || o->pins != pin_refs[o]) {
      return Internal("hidden object " + o->key->ShortString() + " state or pins");
    }
    RETURN_IF_ERROR(account(*o));
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
      const Object* prev = nullptr;
      for (const Object* o = ts.lru.head; o != nullptr;) {
        const ReplicaSlot* s = o->SlotOn(id);
        if (s == nullptr || o->state != ObjectState::kCommitted || s->lru_prev != prev ||
            static_cast<int>(s->tier) != t) {
          return Internal(NodeText(id) + ": LRU list broken at " + o->key->ShortString());
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
