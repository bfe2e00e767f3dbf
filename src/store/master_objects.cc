// MasterState: the object slab, the key index, replica slots and LRU links (the compact layout
// described at the top of master_impl.h). Puts, reads and time are in master_state.cc; membership,
// eviction and reports in master_nodes.cc.
#include <cstring>

#include "dualpath/common/check.h"
#include "store/master_impl.h"

namespace dualpath::store {

ObjectKey MasterState::Impl::KeyOf(ObjIndex i) const {
  const Object& o = Obj(i);
  return ObjectKey{models_[o.model].first, o.hash};
}

uint64_t MasterState::Impl::HashOfObject(ObjIndex i) const { return HashOf(KeyOf(i)); }

ObjIndex MasterState::Impl::Find(const ObjectKey& key) const {
  auto m = model_index_.find(key.model_fingerprint);
  if (m == model_index_.end()) return kNoObject;  // no object of this model at all
  const uint32_t model = m->second;
  return index_.Find(HashOf(key), [&](ObjIndex i) {
    const Object& o = Obj(i);
    return o.model == model && o.hash == key.hash;
  });
}

ObjIndex MasterState::Impl::NewObject(const ObjectKey& key) {
  ObjIndex i = free_head_;
  if (i != kNoObject) {
    free_head_ = Obj(i).extra;
  } else {
    if (allocated_ >= kNoObject) return kNoObject;  // 2^32 - 1 records: the index's range
    if (allocated_ % kChunkObjects == 0) {
      chunks_.push_back(MakeHugeArray<Object>(kChunkObjects));
    }
    i = static_cast<ObjIndex>(allocated_++);
  }
  // The model's slot: the fingerprint's, or a new (reused) one.
  uint32_t model;
  if (auto m = model_index_.find(key.model_fingerprint); m != model_index_.end()) {
    model = m->second;
  } else {
    if (!models_free_.empty()) {
      model = models_free_.back();
      models_free_.pop_back();
      models_[model] = {key.model_fingerprint, 0};
    } else {
      model = static_cast<uint32_t>(models_.size());
      models_.emplace_back(key.model_fingerprint, 0);
    }
    model_index_.emplace(key.model_fingerprint, model);
  }
  models_[model].second++;
  Object& o = Obj(i);
  o = Object{};
  o.hash = key.hash;
  o.model = model;
  o.set_state(ObjectState::kPending);
  index_.Insert(HashOf(key), i, [this](ObjIndex j) { return HashOfObject(j); });
  return i;
}

void MasterState::Impl::Unindex(ObjIndex i) {
  index_.Erase(HashOfObject(i), i, [this](ObjIndex j) { return HashOfObject(j); });
}

void MasterState::Impl::FreeObject(ObjIndex i, bool indexed) {
  Object& o = Obj(i);
  DUALPATH_CHECK(o.num_replicas == 0 && o.pins == 0, "store master: freeing a live object");
  if (indexed) Unindex(i);
  auto& [fingerprint, count] = models_[o.model];
  if (--count == 0) {
    model_index_.erase(fingerprint);
    models_free_.push_back(o.model);
  }
  o = Object{};
  o.set_state(ObjectState::kFree);
  o.extra = free_head_;
  free_head_ = i;
}

ReplicaSlot& MasterState::Impl::SlotAt(ObjIndex i, int r) {
  Object& o = Obj(i);
  return r == 0 ? o.slot0 : extras_[o.extra][r - 1];
}

const ReplicaSlot& MasterState::Impl::SlotAt(ObjIndex i, int r) const {
  const Object& o = Obj(i);
  return r == 0 ? o.slot0 : extras_[o.extra][r - 1];
}

ReplicaSlot* MasterState::Impl::SlotOn(ObjIndex i, NodeId node) {
  const int n = static_cast<int>(Obj(i).num_replicas);
  for (int r = 0; r < n; ++r) {
    ReplicaSlot& s = SlotAt(i, r);
    if (s.node == node.value()) return &s;
  }
  return nullptr;
}

ReplicaSlot& MasterState::Impl::AddSlot(ObjIndex i, NodeId node, Tier tier, uint64_t offset) {
  Object& o = Obj(i);
  DUALPATH_CHECK(o.num_replicas < kMaxReplicas, "store master: a fourth replica");
  if (o.num_replicas == 1) {
    // The second replica: a pair of out-of-line slots, from the free list or new.
    if (extras_free_ != kNoObject) {
      o.extra = extras_free_;
      extras_free_ = extras_[o.extra][0].node;
    } else {
      DUALPATH_CHECK(extras_.size() < kNoObject, "store master: replica slots exhausted");
      o.extra = static_cast<uint32_t>(extras_.size());
      extras_.emplace_back();
    }
  }
  ReplicaSlot& s = SlotAt(i, o.num_replicas);
  o.num_replicas++;
  s = ReplicaSlot{};
  s.node = node.value();
  s.tier = tier;
  s.set_offset(offset);
  return s;
}

void MasterState::Impl::DropSlot(ObjIndex i, NodeId node) {
  Object& o = Obj(i);
  const int n = static_cast<int>(o.num_replicas);
  int at = -1;
  for (int r = 0; r < n && at < 0; ++r) {
    if (SlotAt(i, r).node == node.value()) at = r;
  }
  DUALPATH_CHECK(at >= 0, "store master: DropSlot of a node the object has no replica on");
  for (int r = at; r + 1 < n; ++r) SlotAt(i, r) = SlotAt(i, r + 1);
  o.num_replicas--;
  if (o.num_replicas == 1) {
    // Back to one replica: the pair returns to the free list (its first node is the link).
    extras_[o.extra][0].node = extras_free_;
    extras_free_ = o.extra;
    o.extra = kNoObject;
  }
}

// ---------------------------------------------------------------------------------------------
// LRU lists: doubly linked through the slots on (node, tier), by object index.

void MasterState::Impl::LruAppend(LruList& list, NodeId node, ObjIndex o) {
  ReplicaSlot* s = SlotOn(o, node);
  s->lru_prev = list.tail;
  s->lru_next = kNoObject;
  if (list.tail != kNoObject) {
    SlotOn(list.tail, node)->lru_next = o;
  } else {
    list.head = o;
  }
  list.tail = o;
}

void MasterState::Impl::LruUnlink(LruList& list, NodeId node, ObjIndex o) {
  ReplicaSlot* s = SlotOn(o, node);
  if (s->lru_prev != kNoObject) {
    SlotOn(s->lru_prev, node)->lru_next = s->lru_next;
  } else {
    list.head = s->lru_next;
  }
  if (s->lru_next != kNoObject) {
    SlotOn(s->lru_next, node)->lru_prev = s->lru_prev;
  } else {
    list.tail = s->lru_prev;
  }
  s->lru_prev = s->lru_next = kNoObject;
}

void MasterState::Impl::Touch(ObjIndex o) {
  const int n = static_cast<int>(Obj(o).num_replicas);
  for (int r = 0; r < n; ++r) {
    const ReplicaSlot& s = SlotAt(o, r);
    const NodeId node = s.node_id();
    LruList& list = TierOf(node, s.tier).lru;
    if (list.tail == o) continue;
    LruUnlink(list, node, o);
    LruAppend(list, node, o);
  }
}

}  // namespace dualpath::store
