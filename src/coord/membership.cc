#include "dualpath/coord/membership.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "coord/lease_keeper.h"
#include "dualpath/common/log.h"

namespace dualpath::coord {

Status CheckCoordName(const std::string& name, const char* what, size_t max_len) {
  if (name.empty() || name.size() > max_len) {
    return InvalidArgument(
        fmt::format("{} '{}': length must be 1..{} characters", what, name, max_len));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgument(
          fmt::format("{} '{}': only letters, digits, '.', '_' and '-' are allowed", what, name));
    }
  }
  return Status::Ok();
}

std::string Membership::NodesPrefix(const std::string& cluster) {
  return fmt::format("/dualpath/{}/nodes/", cluster);
}

std::string Membership::NodeKey(const std::string& cluster, const std::string& name) {
  return NodesPrefix(cluster) + name;
}

// The registration thread: registers (lease + a put-if-absent transaction), then sleeps while the
// LeaseKeeper keeps the lease alive and a watch of its own key reports what happens to the key,
// and acts on what they report: a lost lease -> register again under a new one; the key deleted
// (or put by someone else) while the lease lives -> put it back under the lease, if the name is
// free; keep-alives answered again after an outage -> check that the key is still ours.
//
// The name is never taken from another holder: a put-if-absent finds it taken -> before the first
// registration, wait while the holder's lease runs down (a dead predecessor of this node) and
// refuse (kAlreadyExists, Register returns it) once the holder shows it is alive (its lease was
// renewed, or outlived its TTL); after it, wait for the name to be free again.
struct Membership::Impl {
  EtcdClient* client;
  MembershipOptions options;

  std::mutex mu;
  std::condition_variable cv;
  std::string name;   // empty until Register
  std::string value;  //
  std::string key;
  bool running = false;       // the thread runs
  bool stop = false;          // asks the thread to stop
  bool lost = false;          // the keeper reported the lease lost
  bool recovered = false;     // the keeper reported keep-alives answered again
  bool key_gone = false;      // the watch saw our key deleted, or put under another lease
  bool watch_broken = false;  // the key's watch ended for good: check the key, watch again
  bool is_registered = false;
  Status last_error;
  Status refused;  // the name is held by a live registration (before our first one): Register fails
  int64_t registrations = 0;
  LeaseId current_lease = 0;   // the lease our key is under (0: none)
  int64_t key_revision = 0;    // the revision of our last put of the key: older events are history
  LeaseId previous_lease = 0;  // the last lease we lost: its key may still linger in etcd
  std::unique_ptr<LeaseKeeper> keeper;  // replaced only by the thread (and Deregister after it)
  std::unique_ptr<Watch> key_watch;     // our own key; replaced only by the thread
  std::thread thread;

  // A holder of our name that is not us, followed until it proves alive or its key goes.
  struct Holder {
    LeaseId lease = 0;
    int64_t last_ttl = 0;
    Nanos give_up_at = 0;  // a lease still there after this was renewed: its holder is alive
  } holder;
  bool holder_logged_alive = false;  // the "lost the name" error was logged for this holder

  static Nanos Now() { return SteadyClock::Default().Now(); }

  // (Re)starts the watch of our key from `revision` (the put that made it ours). Called by the
  // thread without mu held; the old watch is destroyed outside mu (its callbacks take mu).
  void WatchKey(int64_t revision) {
    WatchOptions o;
    o.start_revision = revision + 1;
    o.on_events = [this](const std::vector<WatchEvent>& events) {
      std::lock_guard lock(mu);
      for (const WatchEvent& e : events) {
        // An event from before our last put (the expiry of a lease we lost) is history.
        if (e.kv.mod_revision <= key_revision) continue;
        if (e.type == EventType::kDelete || e.kv.lease != current_lease) key_gone = true;
      }
      cv.notify_all();
    };
    o.on_error = [this](const Status& why) {
      log::Warn("membership {}: watch of its own key ended: {}", key, why.ToString());
      std::lock_guard lock(mu);
      watch_broken = true;
      cv.notify_all();
    };
    Result<std::unique_ptr<Watch>> w = client->WatchKey(key, std::move(o));
    std::unique_ptr<Watch> old;
    {
      std::lock_guard lock(mu);
      old = std::move(key_watch);
      if (w.ok()) {
        key_watch = std::move(w).value();
        watch_broken = false;
      } else {
        log::Warn("membership {}: cannot watch its own key: {}", key, w.status().ToString());
        watch_broken = true;  // checked and retried by the loop
      }
    }
  }

  // Puts the key under `lease` if nobody holds it. Ok: ours now (the txn's revision in *rev);
  // kAlreadyExists: held under another lease (recorded in `holder`).
  Status PutIfFree(LeaseId lease, int64_t* rev) {
    ASSIGN_OR_RETURN(TxnResult txn, client->PutIfAbsent(key, value, lease));
    if (txn.succeeded) {
      *rev = txn.revision;
      return Status::Ok();
    }
    if (txn.current && txn.current->lease == lease) {  // our own put, answered late
      *rev = txn.current->mod_revision;
      return Status::Ok();
    }
    const LeaseId other = txn.current ? txn.current->lease : 0;
    std::lock_guard lock(mu);
    if (holder.lease != other) {
      holder = Holder{other, 0, 0};
      holder_logged_alive = false;
    }
    return Status(Code::kAlreadyExists,
                  fmt::format("membership {}: the name is held by another registration (lease "
                              "{:x}, value '{}')",
                              key, other, txn.current ? txn.current->value : ""));
  }

  // Grants a lease and puts the key under it if the name is free. Called by the thread without mu
  // held.
  Status RegisterOnce() {
    const Nanos granted_at = Now();
    ASSIGN_OR_RETURN(Lease lease, client->LeaseGrant(options.ttl));
    int64_t rev = 0;
    Status put = PutIfFree(lease.id, &rev);
    if (!put.ok()) {
      // The lease would expire on its own; revoking it early keeps etcd tidy.
      (void)client->LeaseRevoke(lease.id);
      return put;
    }
    auto keeper_new = std::make_unique<LeaseKeeper>(
        client, lease, granted_at,
        LeaseKeeper::Callbacks{[this](const Status& why) {
                                 log::Warn("membership {}: {}; registering again", key,
                                           why.ToString());
                                 std::lock_guard lock(mu);
                                 lost = true;
                                 is_registered = false;
                                 cv.notify_all();
                               },
                               [this] {
                                 std::lock_guard lock(mu);
                                 recovered = true;
                                 cv.notify_all();
                               }});
    std::unique_ptr<LeaseKeeper> old;
    {
      std::lock_guard lock(mu);
      old = std::move(keeper);
      keeper = std::move(keeper_new);
      current_lease = lease.id;
      key_revision = rev;
      is_registered = true;
      lost = false;
      recovered = false;
      key_gone = false;
      ++registrations;
      last_error = Status::Ok();
      cv.notify_all();
    }
    WatchKey(rev);
    return Status::Ok();  // `old` (a keeper that reported its lease lost) stops here
  }

  // The name is held by `holder.lease`. Decides, before our first registration, whether that
  // holder is alive (then Register is refused); otherwise only logs. Called without mu held.
  void FollowHolder() {
    LeaseId lease;
    LeaseId ours_before;
    {
      std::lock_guard lock(mu);
      lease = holder.lease;
      ours_before = previous_lease;
    }
    if (lease != 0 && lease == ours_before) {
      // Our own lost lease, which etcd still keeps (it came back with its data): the key under it
      // is ours from before. Revoking the lease deletes it, and the next try takes the name.
      log::Info("membership {}: dropping the key of its own lost lease {:x}", key, lease);
      (void)client->LeaseRevoke(lease);
      return;
    }
    Result<int64_t> ttl = lease == 0 ? Result<int64_t>(int64_t{0}) : client->LeaseTimeToLive(lease);
    if (!ttl.ok()) return;  // the lease is gone (the key goes with it) or etcd did not answer
    std::lock_guard lock(mu);
    if (holder.lease != lease) return;
    const Nanos now = Now();
    bool alive = false;
    if (holder.give_up_at == 0) {
      // A dead holder's lease runs out within its remaining TTL (etcd rounds it down) and etcd
      // then deletes the key; one second of slack for etcd's expiry sweep.
      holder.give_up_at = now + (*ttl + 2) * kNanosPerSecond;
      log::Warn(
          "membership {}: the name is held by lease {:x} ({} s left); waiting to see whether "
          "its holder is alive",
          key, lease, *ttl);
    } else {
      alive = *ttl > holder.last_ttl || now >= holder.give_up_at || lease == 0;
    }
    holder.last_ttl = *ttl;
    if (alive && registrations == 0) {
      log::Error("membership {}: refused: the name is held by a live registration (lease {:x})",
                 key, lease);
      refused = Status(Code::kAlreadyExists,
                       fmt::format("membership {}: the name is held by a live registration "
                                   "(lease {:x} is being renewed): another process registered "
                                   "as '{}'",
                                   key, lease, name));
      cv.notify_all();
    } else if (alive && !holder_logged_alive) {
      log::Error(
          "membership {}: lost the name to another live registration (lease {:x}); waiting "
          "for it to go",
          key, lease);
      holder_logged_alive = true;
    }
  }

  // After an outage the lease survived (etcd restarted on its data), or the key's watch ended:
  // is the key still ours? A missing key is put back (the watchers saw it go: a new
  // registration); a key held by someone else is left alone.
  Status Verify() {
    LeaseId ours;
    {
      std::lock_guard lock(mu);
      ours = current_lease;
    }
    ASSIGN_OR_RETURN(std::optional<KeyValue> kv, client->Get(key));
    if (kv && kv->lease == ours && kv->value == value) {
      {
        std::lock_guard lock(mu);
        key_revision = kv->mod_revision;
      }
      WatchKey(kv->mod_revision);
      return Status::Ok();
    }
    return PutBack();
  }

  // Puts our key back under the current lease, if the name is free.
  Status PutBack() {
    LeaseId ours;
    {
      std::lock_guard lock(mu);
      ours = current_lease;
      key_gone = false;
    }
    int64_t rev = 0;
    Status s = PutIfFree(ours, &rev);
    if (!s.ok()) return s;
    log::Warn("membership {}: its key was gone while its lease lived; registered again", key);
    {
      std::lock_guard lock(mu);
      key_revision = rev;
      ++registrations;  // watchers saw the node leave: it is a new registration to them
    }
    WatchKey(rev);
    return Status::Ok();
  }

  void Loop() {
    Nanos backoff = 100 * kNanosPerMilli;
    // A name held by another lease is looked at this often (a poll of etcd, not a sync).
    const Nanos kHolderPoll = 200 * kNanosPerMilli;
    std::unique_lock lock(mu);
    while (!stop && refused.ok()) {
      if (!is_registered) {
        if (keeper) previous_lease = keeper->lease();
        lock.unlock();
        Status s = RegisterOnce();
        if (s.code() == Code::kAlreadyExists) FollowHolder();
        lock.lock();
        if (s.ok()) {
          backoff = 100 * kNanosPerMilli;
          continue;
        }
        last_error = s;
        cv.notify_all();
        const Nanos pause = s.code() == Code::kAlreadyExists ? kHolderPoll : backoff;
        cv.wait_for(lock, std::chrono::nanoseconds(pause), [this] { return stop; });
        if (s.code() != Code::kAlreadyExists) {
          backoff = std::min<Nanos>(backoff * 2, std::max<Nanos>(options.ttl / 3, kNanosPerSecond));
        }
        continue;
      }
      if (key_gone || recovered || watch_broken) {
        const bool gone = key_gone;
        recovered = false;
        watch_broken = false;
        lock.unlock();
        Status s = gone ? PutBack() : Verify();
        if (s.code() == Code::kAlreadyExists) FollowHolder();
        lock.lock();
        if (!s.ok()) {
          log::Warn("membership {}: {}", key, s.ToString());
          // Try again after a pause (the name may come free; etcd may answer again).
          if (gone) {
            key_gone = true;
          } else {
            recovered = true;
          }
          cv.wait_for(
              lock,
              std::chrono::nanoseconds(s.code() == Code::kAlreadyExists ? kHolderPoll : backoff),
              [this] { return stop || lost; });
        }
        continue;
      }
      cv.wait(lock, [this] { return stop || lost || recovered || key_gone || watch_broken; });
    }
  }

  // Stops the thread, the watch and the keeper; returns the lease that was kept alive (0: none).
  LeaseId StopAll() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
    std::unique_ptr<LeaseKeeper> stopped;
    std::unique_ptr<Watch> watch;
    bool was_registered;
    {
      std::lock_guard lock(mu);
      stopped = std::move(keeper);
      watch = std::move(key_watch);
      was_registered = is_registered;
      running = false;
      is_registered = false;
      current_lease = 0;
    }
    // Outside mu: the keeper's and the watch's callbacks take it, and stopping waits for them.
    watch.reset();
    if (!stopped) return 0;
    stopped->Stop();
    return was_registered ? stopped->lease() : 0;
  }
};

Membership::Membership(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Membership::~Membership() {
  bool running;
  {
    std::lock_guard lock(impl_->mu);
    running = impl_->running;
  }
  if (running) (void)Deregister();
}

Result<std::unique_ptr<Membership>> Membership::Create(EtcdClient* client,
                                                       MembershipOptions options) {
  RETURN_IF_ERROR(CheckCoordName(options.cluster, "cluster", 64));
  if (options.ttl < kNanosPerSecond || options.ttl > 3600 * kNanosPerSecond) {
    return InvalidArgument(
        fmt::format("membership ttl {:.3f} s is outside 1 s .. 1 h", ToSeconds(options.ttl)));
  }
  auto impl = std::make_unique<Impl>();
  impl->client = client;
  impl->options = std::move(options);
  return std::unique_ptr<Membership>(new Membership(std::move(impl)));
}

Status Membership::Register(const std::string& name, const std::string& value, Nanos timeout) {
  RETURN_IF_ERROR(CheckCoordName(name, "node name", 128));
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  if (m.running) {
    return FailedPrecondition(fmt::format("membership: already registered as '{}'", m.name));
  }
  m.name = name;
  m.value = value;
  m.key = NodeKey(m.options.cluster, name);
  m.running = true;
  m.stop = false;
  m.is_registered = false;
  m.refused = Status::Ok();
  m.holder = Impl::Holder{};
  m.last_error = Status::Ok();
  m.thread = std::thread([&m] { m.Loop(); });
  const bool done = m.cv.wait_for(lock, std::chrono::nanoseconds(timeout),
                                  [&m] { return m.is_registered || !m.refused.ok(); });
  if (done && m.is_registered) return Status::Ok();
  if (!m.refused.ok()) {
    // Another live process holds the name: this one must not run as it.
    Status refused = m.refused;
    lock.unlock();
    (void)m.StopAll();
    return refused;
  }
  return Timeout(fmt::format("membership: {} not registered within {:.1f} s (still trying): {}",
                             m.key, ToSeconds(timeout),
                             m.last_error.ok() ? "no answer yet" : m.last_error.ToString()));
}

Status Membership::Deregister() {
  Impl& m = *impl_;
  std::string key;
  {
    std::lock_guard lock(m.mu);
    if (!m.running) return Status::Ok();
    key = m.key;
  }
  const LeaseId lease = m.StopAll();
  if (lease == 0) return Status::Ok();
  // Delete only our own key (a newer incarnation of the node may have replaced it), then revoke:
  // revoking alone would also delete it, but the delete tells watchers at once and by name.
  Status status;
  auto kv = m.client->Get(key);
  if (kv.ok() && kv.value() && kv.value()->lease == lease) {
    auto deleted = m.client->DeleteIfModRevision(key, kv.value()->mod_revision);
    if (!deleted.ok()) status = deleted.status();
  } else if (!kv.ok()) {
    status = kv.status();
  }
  Status revoked = m.client->LeaseRevoke(lease);
  if (!revoked.ok() && revoked.code() != Code::kCoordLeaseLost && status.ok()) status = revoked;
  return status;
}

void Membership::Abandon() { (void)impl_->StopAll(); }

bool Membership::registered() const {
  std::lock_guard lock(impl_->mu);
  return impl_->is_registered;
}

int64_t Membership::registrations() const {
  std::lock_guard lock(impl_->mu);
  return impl_->registrations;
}

int64_t Membership::keepalives() const {
  std::lock_guard lock(impl_->mu);
  return impl_->keeper ? impl_->keeper->keepalives() : 0;
}

LeaseId Membership::lease() const {
  std::lock_guard lock(impl_->mu);
  return impl_->keeper && impl_->is_registered ? impl_->keeper->lease() : 0;
}

namespace {

NodeInfo NodeFrom(const KeyValue& kv, size_t prefix_len) {
  return NodeInfo{kv.key.substr(prefix_len), kv.value, kv.lease, kv.mod_revision};
}

}  // namespace

Result<std::vector<NodeInfo>> Membership::ListNodes() {
  const std::string prefix = NodesPrefix(impl_->options.cluster);
  ASSIGN_OR_RETURN(RangeResult range, impl_->client->Range(prefix));
  std::vector<NodeInfo> nodes;
  nodes.reserve(range.kvs.size());
  for (const KeyValue& kv : range.kvs) nodes.push_back(NodeFrom(kv, prefix.size()));
  return nodes;
}

Result<NodeWatch> Membership::WatchNodes(std::function<void(const NodeEvent&)> on_event,
                                         std::function<void(const Status&)> on_error) {
  const std::string prefix = NodesPrefix(impl_->options.cluster);
  ASSIGN_OR_RETURN(RangeResult range, impl_->client->Range(prefix));
  NodeWatch out;
  out.revision = range.revision;
  for (const KeyValue& kv : range.kvs) out.nodes.push_back(NodeFrom(kv, prefix.size()));
  WatchOptions options;
  // From the revision after the snapshot: every change after it, none before.
  options.start_revision = range.revision + 1;
  options.on_events = [on_event = std::move(on_event),
                       n = prefix.size()](const std::vector<WatchEvent>& events) {
    for (const WatchEvent& e : events) {
      NodeEvent ev;
      ev.name = e.kv.key.substr(n);
      ev.revision = e.kv.mod_revision;
      // A put of a live node again (a new lease, a new value) reads as a join too: the watcher
      // learns the current value.
      ev.kind = e.type == EventType::kPut ? NodeEvent::Kind::kJoined : NodeEvent::Kind::kLeft;
      if (e.type == EventType::kPut) ev.value = e.kv.value;
      on_event(ev);
    }
  };
  options.on_error = std::move(on_error);
  ASSIGN_OR_RETURN(out.watch, impl_->client->WatchPrefix(prefix, std::move(options)));
  return out;
}

}  // namespace dualpath::coord
