// StoreClient's data path: puts (reserve, write every replica, commit or abort) and gets (pin,
// read a replica, verify, unpin), moving bytes through same-host shm files or the transfer engine.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <optional>

#include "dualpath/common/log.h"
#include "dualpath/common/parallel.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/copy_verify.h"
#include "store/client_impl.h"
#include "store/node_proto.h"

namespace dualpath::store {

namespace {

Nanos Now() { return SteadyClock::Default().Now(); }

int64_t WallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A put's commit that a new leader does not know is put again at most this many times.
constexpr int kPutAttempts = 3;

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Counts transfer batches' completions; Wait returns once every submitted batch completed.
class BatchWaiter {
 public:
  // A completion callback for the batch with index `slot`.
  std::function<void(const Status&)> Slot(size_t slot) {
    {
      std::lock_guard lock(mu_);
      if (results_.size() <= slot) results_.resize(slot + 1);
      ++outstanding_;
    }
    return [this, slot](const Status& s) {
      std::lock_guard lock(mu_);
      results_[slot] = s;
      if (--outstanding_ == 0) cv_.notify_all();
    };
  }
  // For a batch Submit refused: its callback will never run.
  void Cancel(size_t slot, const Status& s) {
    std::lock_guard lock(mu_);
    results_[slot] = s;
    --outstanding_;
  }
  // The engine completes every submitted batch (a dead peer fails them after its peer_timeout).
  std::vector<Status> Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    return results_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t outstanding_ = 0;
  std::vector<Status> results_;
};

// One copy to move: `len` bytes between local `addr` and the node's tier at `offset`.
struct Move {
  size_t item;
  uint64_t local;
  uint64_t offset;
  uint64_t len;
};

// Batches of at least this many bytes split their passes over ClientOptions::copy_threads.
constexpr uint64_t kParallelPassBytes = 4ull << 20;

// One pass over an object's bytes on this host: a copy (dst set) that also checksums what it
// copies when `sum` (kv::CopyAndChecksum: one read of the source, streaming stores to the
// destination, the XXH3 of the same slices while they are in cache), or a checksum alone (dst
// null). Issue 27: the same-host paths did a memcpy and then a second pass for the checksum.
struct Pass {
  size_t item;
  const std::byte* src;
  std::byte* dst;
  uint64_t len;
  uint64_t seed;
  bool sum;
  uint64_t result = 0;  // the checksum, when `sum`
};

// The bytes of a mapped tier file at `offset` (the caller checked the range).
std::byte* TierBytes(const ShmTier& tier, uint64_t offset) {
  return reinterpret_cast<std::byte*>(tier.data()) + offset;
}

// Runs the passes, split over the client's copy threads when they move enough bytes.
void RunPasses(const ClientOptions& options, std::vector<Pass>& passes) {
  uint64_t bytes = 0;
  for (const Pass& p : passes) bytes += p.len;
  const size_t threads = bytes < kParallelPassBytes ? 1 : ThreadsForIdleCpus(options.copy_threads);
  ParallelFor(passes.size(), threads, [&](size_t k) {
    Pass& p = passes[k];
    if (p.dst == nullptr) {
      p.result = kv::BlockChecksum(std::span<const std::byte>(p.src, p.len), p.seed);
    } else if (p.sum) {
      p.result = kv::CopyAndChecksum(p.src, p.dst, p.len, p.seed);
    } else {
      std::memcpy(p.dst, p.src, p.len);
    }
  });
}

}  // namespace

bool StoreClient::Impl::Registered(const void* addr, uint64_t len) const {
  std::lock_guard lock(buffers_mu);
  const uint64_t a = Addr(addr);
  auto it = buffers.upper_bound(a);
  if (it == buffers.begin()) return false;
  --it;
  return a >= it->first && a + len <= it->first + it->second.first;
}

Status StoreClient::Impl::EnsureStaging(uint64_t bytes) {
  if (bytes <= staging_size) return Status::Ok();
  uint64_t size = std::max<uint64_t>(bytes, options.staging_bytes);
  if (staging != nullptr) {
    RETURN_IF_ERROR(engine->DeregisterRegion(staging_region));
    staging.reset();
    staging_size = 0;
  }
  auto buf = std::make_unique<std::byte[]>(size);
  ASSIGN_OR_RETURN(staging_region, engine->RegisterRegion(buf.get(), size));
  staging = std::move(buf);
  staging_size = size;
  return Status::Ok();
}

Result<ClientPeer> StoreClient::Impl::Peer(const v1::NodeEndpoint& ep) {
  auto it = peers.find(ep.transfer_addr());
  if (it != peers.end()) return it->second;
  ASSIGN_OR_RETURN(transfer::PeerId id, engine->Connect(ep.transfer_addr()));
  // The node registers its tier before it listens, so its HELLO carries the region.
  ASSIGN_OR_RETURN(std::vector<transfer::RegionRange> regions, engine->RemoteRegions(id));
  ClientPeer peer{id, 0, 0};
  for (const transfer::RegionRange& r : regions) {
    if (r.length >= ep.dram_bytes() && r.length > peer.length) peer = {id, r.addr, r.length};
  }
  if (peer.length == 0) {
    return Unavailable(fmt::format("store node {} at {} advertises no region of its {} DRAM bytes",
                                   ep.node(), ep.transfer_addr(), ep.dram_bytes()));
  }
  peers[ep.transfer_addr()] = peer;
  return peer;
}

void StoreClient::Impl::DropPeer(const std::string& transfer_addr) { peers.erase(transfer_addr); }

bool StoreClient::Impl::IsLocal(const v1::NodeEndpoint& ep) const {
  return options.local_shm && !ep.host().empty() && ep.host() == options.host &&
         !ep.shm_path().empty();
}

ShmTier* StoreClient::Impl::LocalTier(const v1::NodeEndpoint& ep) {
  if (!IsLocal(ep)) return nullptr;
  // Checked already for this master answer (the same endpoint): no second stat of the path.
  if (auto checked = tier_checks.find(ep.node()); checked != tier_checks.end()) {
    return checked->second;
  }
  ShmTier* tier = LocalTierChecked(ep);
  tier_checks.emplace(ep.node(), tier);
  return tier;
}

ShmTier* StoreClient::Impl::LocalTierChecked(const v1::NodeEndpoint& ep) {
  auto it = mappings.find(ep.node());
  // A restarted node made a new file (a new incarnation): map that one, once it is verified.
  if (it != mappings.end() &&
      (it->second->path() != ep.shm_path() || it->second->incarnation() != ep.incarnation() ||
       it->second->size() < ep.dram_bytes() || !it->second->StillAtPath())) {
    mappings.erase(it);
    it = mappings.end();
  }
  if (it == mappings.end()) {
    const std::string refusal_key =
        fmt::format("{}/{:016x}/{}", ep.node(), ep.incarnation(), ep.shm_path());
    if (refused_tiers.contains(refusal_key)) return nullptr;
    TierExpectation expect{options.shm_dir,
                           TierIdentity{options.cluster, NodeId(ep.node()), ep.incarnation()},
                           ep.dram_bytes(), ::geteuid()};
    auto tier = ShmTier::Open(ep.shm_path(), expect);
    if (!tier.ok()) {
      // Refused (not the node's file, or not there): never mapped, never written. The location
      // came from a peer (the node's JoinNode, passed on by the master), so it is logged.
      refused_tiers.insert(refusal_key);
      Count([](ClientStats& st) { ++st.shm_refused; });
      log::Warn(
          "store client: node {} is on this host, but its tier file is refused: {}; using "
          "the network",
          ep.node(), tier.status().ToString());
      return nullptr;
    }
    it = mappings.emplace(ep.node(), std::move(tier).value()).first;
  }
  return it->second.get();
}

namespace {

// Runs the transfer batches of `moves` grouped by node (one batch per node). Returns per move
// whether it completed; the failed nodes' peers are dropped from the cache.
// `meanwhile` runs on this thread after the batches were submitted, while they move.
std::vector<Status> RunMoves(StoreClient::Impl& c, transfer::Op op,
                             const std::map<uint32_t, const v1::NodeEndpoint*>& endpoints,
                             const std::map<uint32_t, std::vector<Move>>& by_node,
                             std::map<uint32_t, std::vector<size_t>>* move_index,
                             size_t total_moves, const std::function<void()>& meanwhile = {}) {
  std::vector<Status> out(total_moves);
  BatchWaiter waiter;
  std::vector<uint32_t> slots;
  for (const auto& [node, moves] : by_node) {
    const v1::NodeEndpoint& ep = *endpoints.at(node);
    const std::vector<size_t>& idx = (*move_index)[node];
    Status refused;
    Result<ClientPeer> peer = Unavailable("not tried");
    if (c.options.skip_addr && c.options.skip_addr(ep.transfer_addr())) {
      // Known unreachable (its host is cut off): fail now rather than after a connect or a peer
      // timeout; the caller treats it as any failed node (a miss, a failed put).
      refused = Unavailable(fmt::format(
          "store node {} at {} is unreachable over the compute network", node, ep.transfer_addr()));
    } else if (peer = c.Peer(ep); !peer.ok()) {
      refused = peer.status();
    } else {
      transfer::Batch batch{.peer = peer->id, .cls = transfer::TrafficClass::kLow, .op = op};
      // Objects the master placed back to back, from or into a caller's buffer laid out the same
      // way, move as one operation.
      batch.coalesce = true;
      batch.poll = op == transfer::Op::kGet && c.options.transfer_poll;
      for (const Move& m : moves) {
        if (m.offset > peer->length || m.len > peer->length - m.offset) {
          refused = Internal(fmt::format("location @{} +{} is outside node {}'s {} bytes", m.offset,
                                         m.len, node, peer->length));
          break;
        }
        batch.descs.push_back({m.local, peer->base + m.offset, m.len});
      }
      if (refused.ok()) {
        const size_t slot = slots.size();
        slots.push_back(node);
        batch.on_complete = waiter.Slot(slot);
        refused = c.engine->Submit(std::move(batch));
        if (!refused.ok()) waiter.Cancel(slot, refused);
      }
    }
    if (!refused.ok()) {
      if (peer.ok() || refused.code() == Code::kTransferPeerDead) c.DropPeer(ep.transfer_addr());
      for (size_t i : idx) out[i] = refused;
    }
  }
  if (meanwhile) meanwhile();
  std::vector<Status> done = waiter.Wait();
  for (size_t slot = 0; slot < slots.size(); ++slot) {
    const uint32_t node = slots[slot];
    if (!done[slot].ok()) {
      c.DropPeer(endpoints.at(node)->transfer_addr());
      for (size_t i : (*move_index)[node]) out[i] = done[slot];
    }
  }
  return out;
}

std::map<uint32_t, const v1::NodeEndpoint*> EndpointMap(
    const google::protobuf::RepeatedPtrField<v1::NodeEndpoint>& nodes) {
  std::map<uint32_t, const v1::NodeEndpoint*> out;
  for (const v1::NodeEndpoint& ep : nodes) out[ep.node()] = &ep;
  return out;
}

}  // namespace

// ---- puts ----

Result<std::vector<Status>> StoreClient::Impl::PutLocked(std::span<const PutItem> items) {
  const Nanos until = Now() + options.retry_deadline;
  std::vector<Status> results(items.size(), Unavailable("store put: not attempted"));
  std::vector<std::optional<uint64_t>> checksums(items.size());
  std::vector<size_t> todo(items.size());
  for (size_t i = 0; i < items.size(); ++i) todo[i] = i;

  for (int attempt = 0; attempt < kPutAttempts && !todo.empty(); ++attempt) {
    v1::PutStartRequest start;
    start.set_replicas(options.replicas);
    start.set_tier(v1::TIER_DRAM);
    start.set_preferred_node(options.local_node.value());
    for (size_t i : todo) {
      v1::PutItem* p = start.add_items();
      KeyToProto(items[i].key, p->mutable_key());
      p->set_size(items[i].bytes.size());
    }
    v1::PutStartResponse started;
    const Nanos start_at = Now();
    Status s =
        CallMaster("PutStart", until, [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
          return stub->PutStart(ctx, start, &started);
        });
    const Nanos write_at = Now();
    Count([&](ClientStats& st) { st.put_start_ns += static_cast<uint64_t>(write_at - start_at); });
    if (s.ok() && started.tickets_size() != static_cast<int>(todo.size())) {
      s = Internal(fmt::format("store master PutStart answered {} tickets for {} items",
                               started.tickets_size(), todo.size()));
    }
    if (!s.ok()) {
      for (size_t i : todo) results[i] = s;
      break;
    }
    const auto endpoints = EndpointMap(started.nodes());
    ForgetTierChecks();  // this answer's endpoints: each same-host tier checked once

    // Plan the writes: shm copies now, transfer puts per node (from the caller's registered
    // memory, else from one staging copy of the item shared by its replicas).
    std::vector<Status> ticket_status(todo.size());
    std::vector<uint64_t> staging_at(todo.size(), UINT64_MAX);
    uint64_t staging_need = 0;
    for (size_t t = 0; t < todo.size(); ++t) {
      const v1::PutTicket& ticket = started.tickets(t);
      const PutItem& item = items[todo[t]];
      if (ticket.code() != 0) continue;
      for (const v1::Replica& loc : ticket.locations()) {
        auto ep = endpoints.find(loc.node());
        if (ep == endpoints.end() || loc.tier() != v1::TIER_DRAM) {
          ticket_status[t] = Internal(fmt::format(
              "store master PutStart: a location of {} on node {} ({}) has no DRAM endpoint",
              item.key.ShortString(), loc.node(), static_cast<int>(loc.tier())));
          break;
        }
        // A same-host node whose file cannot be mapped is written over the network.
        if (LocalTier(*ep->second) == nullptr &&
            !Registered(item.bytes.data(), item.bytes.size()) && staging_at[t] == UINT64_MAX) {
          staging_at[t] = staging_need;
          staging_need += item.bytes.size();
        }
      }
    }
    if (staging_need > 0) {
      Status st = EnsureStaging(staging_need);
      if (!st.ok()) {
        for (size_t t = 0; t < todo.size(); ++t) {
          if (staging_at[t] != UINT64_MAX) ticket_status[t] = st;
        }
      }
    }
    std::map<uint32_t, std::vector<Move>> by_node;
    std::map<uint32_t, std::vector<size_t>> move_index;
    std::vector<size_t> move_ticket;
    // Every item's bytes are read once on this host: its first copy (into the staging buffer or
    // a same-host tier file) computes its checksum, bound to the key (a reader of another key
    // whose record points here fails it); an item with neither is checksummed alone.
    std::vector<Pass> passes;
    for (size_t t = 0; t < todo.size(); ++t) {
      const v1::PutTicket& ticket = started.tickets(t);
      const PutItem& item = items[todo[t]];
      if (ticket.code() != 0 || !ticket_status[t].ok()) continue;
      const uint64_t len = item.bytes.size();
      const uint64_t seed = ObjectKeySeed(item.key);
      bool summed = checksums[todo[t]].has_value();
      if (staging_at[t] != UINT64_MAX) {
        passes.push_back({t, item.bytes.data(), staging.get() + staging_at[t], len, seed, !summed});
        summed = true;
      }
      for (const v1::Replica& loc : ticket.locations()) {
        const v1::NodeEndpoint& ep = *endpoints.at(loc.node());
        if (ShmTier* tier = LocalTier(ep)) {
          if (loc.offset() > tier->size() || len > tier->size() - loc.offset()) {
            ticket_status[t] =
                Internal(fmt::format("location @{} +{} is outside node {}'s {} bytes", loc.offset(),
                                     len, ep.node(), tier->size()));
            break;
          }
          passes.push_back(
              {t, item.bytes.data(), TierBytes(*tier, loc.offset()), len, seed, !summed});
          summed = true;
          Count([&](ClientStats& st) { st.bytes_written += len; });
          continue;
        }
        const uint64_t src = staging_at[t] != UINT64_MAX ? Addr(staging.get() + staging_at[t])
                                                         : Addr(item.bytes.data());
        move_index[loc.node()].push_back(move_ticket.size());
        by_node[loc.node()].push_back(Move{t, src, loc.offset(), len});
        move_ticket.push_back(t);
      }
      if (!summed) passes.push_back({t, item.bytes.data(), nullptr, len, seed, true});
    }
    // Staging copies must land before the transfers read them; the rest (same-host copies,
    // checksums of registered memory) runs while the transfers move.
    std::vector<Pass> later;
    std::vector<Pass> first;
    for (Pass& p : passes) {
      const bool staged =
          p.dst != nullptr && p.dst >= staging.get() && p.dst < staging.get() + staging_size;
      (staged ? first : later).push_back(p);
    }
    RunPasses(options, first);
    auto local_work = [&] { RunPasses(options, later); };
    if (!move_ticket.empty()) {
      std::vector<Status> moved = RunMoves(*this, transfer::Op::kPut, endpoints, by_node,
                                           &move_index, move_ticket.size(), local_work);
      for (size_t m = 0; m < moved.size(); ++m) {
        const size_t t = move_ticket[m];
        if (!moved[m].ok()) {
          if (ticket_status[t].ok()) {
            ticket_status[t] =
                moved[m].WithContext(fmt::format("write {}", items[todo[t]].key.ShortString()));
          }
        } else {
          Count([&](ClientStats& st) { st.bytes_written += items[todo[t]].bytes.size(); });
        }
      }
    } else {
      local_work();
    }
    for (const std::vector<Pass>* ps : {&first, &later}) {
      for (const Pass& p : *ps) {
        if (p.sum) checksums[todo[p.item]] = p.result;
      }
    }
    const Nanos commit_at = Now();
    Count([&](ClientStats& st) { st.put_write_ns += static_cast<uint64_t>(commit_at - write_at); });

    // Commit what was written everywhere, abort the rest.
    v1::PutCommitRequest commit;
    v1::PutAbortRequest abort;
    std::vector<size_t> committed;  // ticket index per commit item
    for (size_t t = 0; t < todo.size(); ++t) {
      const v1::PutTicket& ticket = started.tickets(t);
      const size_t i = todo[t];
      if (ticket.code() == static_cast<int>(Code::kStoreObjectExists)) {
        results[i] = Status::Ok();  // equal keys mean equal bytes
      } else if (ticket.code() != 0) {
        results[i] = Status(static_cast<Code>(ticket.code()), ticket.message());
      } else if (!ticket_status[t].ok()) {
        results[i] = ticket_status[t];
        abort.add_put_ids(ticket.put_id());
      } else {
        v1::PutCommitItem* c = commit.add_items();
        c->set_put_id(ticket.put_id());
        c->set_checksum(*checksums[i]);
        committed.push_back(t);
      }
    }
    if (abort.put_ids_size() > 0) {
      v1::PutAbortResponse aborted;
      Status a =
          CallMaster("PutAbort", until, [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
            return stub->PutAbort(ctx, abort, &aborted);
          });
      // A put never aborted expires on the master (put_timeout) and is never visible.
      if (!a.ok()) log::Warn("store client: {}", a.ToString());
      Count([&](ClientStats& st) { st.put_aborts += abort.put_ids_size(); });
    }
    std::vector<size_t> again;
    if (!committed.empty()) {
      v1::PutCommitResponse done;
      Status c = CallMaster("PutCommit", until,
                            [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
                              return stub->PutCommit(ctx, commit, &done);
                            });
      if (c.ok() && done.results_size() != static_cast<int>(committed.size())) {
        c = Internal(fmt::format("store master PutCommit answered {} results for {} items",
                                 done.results_size(), committed.size()));
      }
      for (size_t k = 0; k < committed.size(); ++k) {
        const size_t i = todo[committed[k]];
        if (!c.ok()) {
          results[i] = c;
          continue;
        }
        const v1::ItemStatus& r = done.results(k);
        if (r.code() == 0 || r.code() == static_cast<int>(Code::kStoreObjectExists)) {
          results[i] = Status::Ok();
        } else {
          results[i] = Status(static_cast<Code>(r.code()), r.message());
          // A new leader does not know the put (failover between start and commit): again.
          if (r.code() == static_cast<int>(Code::kStoreUnknownPut) && Now() < until) {
            again.push_back(i);
          }
        }
      }
    }
    Count([&](ClientStats& st) { st.put_commit_ns += static_cast<uint64_t>(Now() - commit_at); });
    todo = std::move(again);
    if (!todo.empty()) Count([](ClientStats& st) { ++st.retries; });
  }
  for (const Status& r : results) {
    Count([&](ClientStats& st) { ++(r.ok() ? st.puts_ok : st.puts_failed); });
  }
  return results;
}

// ---- gets ----

Result<std::vector<ReadResult>> StoreClient::Impl::GetLocked(std::span<const GetItem> items) {
  const Nanos until = Now() + options.retry_deadline;
  v1::GetRequest req;
  for (const GetItem& item : items) KeyToProto(item.key, req.add_keys());
  v1::GetResponse resp;
  RETURN_IF_ERROR(
      CallMaster("Get", until, [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
        return stub->Get(ctx, req, &resp);
      }));
  if (resp.objects_size() != static_cast<int>(items.size())) {
    return Internal(fmt::format("store master Get answered {} objects for {} keys",
                                resp.objects_size(), items.size()));
  }
  const auto endpoints = EndpointMap(resp.nodes());
  ForgetTierChecks();  // this answer's endpoints: each same-host tier checked once
  std::vector<ReadResult> results(items.size());
  // Per item, the replicas to try in order: same host first, then the others as the master
  // listed them (DRAM only: no client reads a node's SSD tier).
  std::vector<std::vector<const v1::Replica*>> order(items.size());
  std::vector<size_t> cursor(items.size(), 0);
  std::vector<Status> last_error(items.size());
  std::vector<size_t> pending;
  for (size_t i = 0; i < items.size(); ++i) {
    const v1::ObjectInfo& obj = resp.objects(i);
    if (!obj.found()) {
      results[i].status =
          NotFound(fmt::format("{} is not in the store", items[i].key.ShortString()));
      continue;
    }
    results[i].size = obj.size();
    if (obj.size() > items[i].dest.size()) {
      results[i].status =
          OutOfRange(fmt::format("{} is {} bytes, the buffer {}", items[i].key.ShortString(),
                                 obj.size(), items[i].dest.size()));
      continue;
    }
    std::vector<const v1::Replica*> local, remote;
    for (const v1::Replica& r : obj.replicas()) {
      auto ep = endpoints.find(r.node());
      if (r.tier() != v1::TIER_DRAM || ep == endpoints.end()) continue;
      (IsLocal(*ep->second) ? local : remote).push_back(&r);
    }
    order[i] = local;
    order[i].insert(order[i].end(), remote.begin(), remote.end());
    if (order[i].empty()) {
      results[i].status = Unavailable(
          fmt::format("{}: no DRAM replica with a known node", items[i].key.ShortString()));
      continue;
    }
    last_error[i] = Unavailable(fmt::format("{}: no replica read", items[i].key.ShortString()));
    pending.push_back(i);
  }

  // Checks `sum`, the checksum of the bytes read into dest (kv::CopyAndChecksum in the pass that
  // copied them there, or a pass over them), against the object under the key this caller asked
  // for (the checksum is seeded with it: ObjectChecksum). Whatever the master answered (location,
  // size, checksum), bytes that are not this key's are rejected.
  auto verify = [&](size_t i, uint64_t sum, const v1::Replica& r, ReadSource source) {
    const v1::ObjectInfo& obj = resp.objects(i);
    if (r.size() != obj.size() || sum != obj.checksum()) {
      last_error[i] = Corruption(fmt::format(
          "{} on node {} @{}: checksum {:016x} under this key, committed {:016x} (size {} / {}): "
          "damaged, stale or another key's bytes",
          items[i].key.ShortString(), r.node(), r.offset(), sum, obj.checksum(), r.size(),
          obj.size()));
      Count([](ClientStats& st) {
        ++st.bad_replicas;
        ++st.rejected;
      });
      return false;
    }
    results[i].status = Status::Ok();
    results[i].source = source;
    results[i].node = NodeId(r.node());
    Count([&](ClientStats& st) {
      ++(source == ReadSource::kLocal ? st.hits_local : st.hits_remote);
      st.bytes_read += obj.size();
    });
    return true;
  };

  // Rounds: each pending item tries its next replica; the remote ones of a round go as one
  // transfer batch per node.
  // The pin lasts until pin_expires (the master's wall clock): a round that starts in the second
  // half of its lease renews it first, so the replicas being read cannot be evicted or reused.
  int64_t pin_expires_ms = resp.pin_expires_unix_ms();
  const int64_t pin_span_ms = pin_expires_ms - WallMillis();
  bool first_round = true;
  while (!pending.empty()) {
    if (!first_round && resp.pin_id() != 0 &&
        WallMillis() >= pin_expires_ms - std::max<int64_t>(pin_span_ms, 0) / 2) {
      v1::RenewPinRequest renew;
      renew.set_pin_id(resp.pin_id());
      v1::RenewPinResponse renewed;
      Status r =
          CallMaster("RenewPin", until, [&](v1::StoreMaster::Stub* stub, grpc::ClientContext* ctx) {
            return stub->RenewPin(ctx, renew, &renewed);
          });
      Count([](ClientStats& st) { ++st.pin_renewals; });
      // Not renewed (the pin expired, or a new leader does not know it): the reads go on, and
      // the checksum still keeps reused bytes from being a hit.
      if (r.ok()) {
        pin_expires_ms = renewed.pin_expires_unix_ms();
      } else {
        log::Debug("store client: {}", r.ToString());
      }
    }
    first_round = false;
    std::vector<size_t> next;
    std::map<uint32_t, std::vector<Move>> by_node;
    std::map<uint32_t, std::vector<size_t>> move_index;
    std::vector<size_t> move_item;
    std::vector<const std::byte*> landed;  // per move: where its bytes land
    // Staging for the round's remote reads into unregistered memory.
    uint64_t staging_need = 0;
    std::vector<uint64_t> staging_at(items.size(), UINT64_MAX);
    for (size_t i : pending) {
      const v1::Replica& r = *order[i][cursor[i]];
      const v1::NodeEndpoint& ep = *endpoints.at(r.node());
      if (IsLocal(ep) && LocalTier(ep) != nullptr) continue;
      if (!Registered(items[i].dest.data(), resp.objects(i).size())) {
        staging_at[i] = staging_need;
        staging_need += resp.objects(i).size();
      }
    }
    Status staged = staging_need > 0 ? EnsureStaging(staging_need) : Status::Ok();
    // A replica that could not be read or failed its check: the item's next one, next round.
    auto advance = [&](size_t i) {
      if (++cursor[i] < order[i].size()) {
        next.push_back(i);
      } else {
        results[i].status = last_error[i];
      }
    };
    std::vector<Pass> local;  // same-host reads: the tier file into dest, checksummed on the way
    for (size_t i : pending) {
      const v1::Replica& r = *order[i][cursor[i]];
      const v1::NodeEndpoint& ep = *endpoints.at(r.node());
      const uint64_t size = resp.objects(i).size();
      if (ShmTier* tier = IsLocal(ep) ? LocalTier(ep) : nullptr) {
        if (r.offset() > tier->size() || size > tier->size() - r.offset()) {
          last_error[i] = Internal(fmt::format("{}: location @{} outside node {}'s tier",
                                               items[i].key.ShortString(), r.offset(), r.node()));
        } else {
          // Straight into dest: a mismatch makes this a miss (or the next replica overwrites
          // it), never a hit.
          local.push_back({i, TierBytes(*tier, r.offset()), items[i].dest.data(), size,
                           ObjectKeySeed(items[i].key), true});
          continue;
        }
      } else if (staging_at[i] != UINT64_MAX && !staged.ok()) {
        last_error[i] = staged;
      } else {
        const std::byte* dst =
            staging_at[i] != UINT64_MAX ? staging.get() + staging_at[i] : items[i].dest.data();
        move_index[r.node()].push_back(move_item.size());
        by_node[r.node()].push_back(Move{i, Addr(dst), r.offset(), size});
        move_item.push_back(i);
        landed.push_back(dst);
        continue;
      }
      advance(i);
    }
    // The same-host copies run while the round's transfers move.
    std::vector<Status> moved;
    if (!move_item.empty()) {
      moved = RunMoves(*this, transfer::Op::kGet, endpoints, by_node, &move_index, move_item.size(),
                       [&] { RunPasses(options, local); });
    } else {
      RunPasses(options, local);
    }
    for (const Pass& p : local) {
      if (!verify(p.item, p.result, *order[p.item][cursor[p.item]], ReadSource::kLocal)) {
        advance(p.item);
      }
    }
    // Transferred bytes: checksummed where they landed (zero-copy), or copied from the staging
    // buffer into dest in the same pass.
    std::vector<Pass> remote;
    for (size_t m = 0; m < moved.size(); ++m) {
      const size_t i = move_item[m];
      const v1::Replica& r = *order[i][cursor[i]];
      if (moved[m].ok()) {
        std::byte* dest = items[i].dest.data();
        remote.push_back({i, landed[m], landed[m] == dest ? nullptr : dest, resp.objects(i).size(),
                          ObjectKeySeed(items[i].key), true});
        continue;
      }
      last_error[i] = moved[m].WithContext(
          fmt::format("read {} from node {}", items[i].key.ShortString(), r.node()));
      Count([](ClientStats& st) { ++st.bad_replicas; });
      advance(i);
    }
    RunPasses(options, remote);
    for (const Pass& p : remote) {
      if (!verify(p.item, p.result, *order[p.item][cursor[p.item]], ReadSource::kRemote)) {
        advance(p.item);
      }
    }
    pending = std::move(next);
  }

  // The bytes are in the caller's buffers: the unpin need not hold up the caller.
  if (resp.pin_id() != 0) QueueUnpin(resp.pin_id());
  for (const ReadResult& r : results) {
    if (!r.status.ok()) Count([](ClientStats& st) { ++st.misses; });
  }
  return results;
}

}  // namespace dualpath::store
