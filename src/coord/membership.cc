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

// The registration thread: registers (lease + put), then sleeps while the LeaseKeeper keeps the
// lease alive, and acts on what the keeper reports: a lost lease -> register again under a new
// one; keep-alives answered again after an outage -> check that the key is still ours.
struct Membership::Impl {
  EtcdClient* client;
  MembershipOptions options;

  std::mutex mu;
  std::condition_variable cv;
  std::string name;   // empty until Register
  std::string value;  //
  std::string key;
  bool running = false;    // the thread runs
  bool stop = false;       // asks the thread to stop
  bool lost = false;       // the keeper reported the lease lost
  bool recovered = false;  // the keeper reported keep-alives answered again
  bool is_registered = false;
  Status last_error;
  int64_t registrations = 0;
  std::unique_ptr<LeaseKeeper> keeper;  // replaced only by the thread (and Deregister after it)
  std::thread thread;

  // Grants a lease and puts the key under it. Called by the thread without mu held.
  Status RegisterOnce() {
    const Nanos granted_at = SteadyClock::Default().Now();
    ASSIGN_OR_RETURN(Lease lease, client->LeaseGrant(options.ttl));
    auto put = client->Put(key, value, lease.id);
    if (!put.ok()) {
      // The lease would expire on its own; revoking it early keeps etcd tidy.
      (void)client->LeaseRevoke(lease.id);
      return put.status();
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
      is_registered = true;
      lost = false;
      recovered = false;
      ++registrations;
      last_error = Status::Ok();
      cv.notify_all();
    }
    return Status::Ok();  // `old` (a keeper that reported its lease lost) stops here
  }

  // After an outage the lease survived (etcd restarted on its data): is the key still ours?
  Status Verify() {
    LeaseId ours;
    {
      std::lock_guard lock(mu);
      ours = keeper ? keeper->lease() : 0;
    }
    ASSIGN_OR_RETURN(std::optional<KeyValue> kv, client->Get(key));
    if (kv && kv->lease == ours && kv->value == value) return Status::Ok();
    log::Warn("membership {}: key missing or not ours after an etcd outage; putting it again", key);
    auto put = client->Put(key, value, ours);
    return put.ok() ? Status::Ok() : put.status();
  }

  void Loop() {
    Nanos backoff = 100 * kNanosPerMilli;
    std::unique_lock lock(mu);
    while (!stop) {
      if (!is_registered) {
        lock.unlock();
        Status s = RegisterOnce();
        lock.lock();
        if (s.ok()) {
          backoff = 100 * kNanosPerMilli;
          continue;
        }
        last_error = s;
        cv.notify_all();
        cv.wait_for(lock, std::chrono::nanoseconds(backoff), [this] { return stop; });
        backoff = std::min<Nanos>(backoff * 2, std::max<Nanos>(options.ttl / 3, kNanosPerSecond));
        continue;
      }
      if (recovered) {
        recovered = false;
        lock.unlock();
        Status s = Verify();
        lock.lock();
        if (!s.ok()) {
          log::Warn("membership {}: check after outage failed: {}", key, s.ToString());
          recovered = true;  // try again after a pause
          cv.wait_for(lock, std::chrono::nanoseconds(backoff), [this] { return stop || lost; });
        }
        continue;
      }
      cv.wait(lock, [this] { return stop || lost || recovered; });
    }
  }

  // Stops the thread and the keeper; returns the lease that was kept alive (0: none).
  LeaseId StopAll() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
    std::unique_ptr<LeaseKeeper> stopped;
    bool was_registered;
    {
      std::lock_guard lock(mu);
      stopped = std::move(keeper);
      was_registered = is_registered;
      running = false;
      is_registered = false;
    }
    // Outside mu: the keeper's callbacks take it, and Stop waits for them.
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
  m.last_error = Status::Ok();
  m.thread = std::thread([&m] { m.Loop(); });
  const bool done =
      m.cv.wait_for(lock, std::chrono::nanoseconds(timeout), [&m] { return m.is_registered; });
  if (done) return Status::Ok();
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
