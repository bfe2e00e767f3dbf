#include "dualpath/coord/leader_election.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "coord/lease_keeper.h"
#include "dualpath/common/log.h"
#include "dualpath/coord/membership.h"

namespace dualpath::coord {

std::string LeaderElection::LeaderKey(const std::string& cluster) {
  return fmt::format("/dualpath/{}/leader", cluster);
}

struct LeaderElection::Impl {
  EtcdClient* client;
  ElectionOptions options;
  std::string value;
  std::string key;

  std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<LeaseKeeper> keeper;  // the candidate's lease, from Campaign to Resign
  bool lease_lost = false;
  bool leader = false;
  int64_t leader_revision = 0;  // mod_revision of our put of the key
  bool key_deleted = false;     // set by the campaign's watch
  bool stopped = false;         // Resign or Abandon: a waiting Campaign returns
  bool waiting = false;         // a Campaign waits for the key to go

  // Takes the keeper out under mu; stops it outside (its callbacks take mu).
  void DropKeeper(LeaseId* lease_out, bool stop_campaign) {
    std::unique_ptr<LeaseKeeper> k;
    {
      std::lock_guard lock(mu);
      k = std::move(keeper);
      leader = false;
      if (stop_campaign) stopped = true;
    }
    cv.notify_all();
    if (lease_out) *lease_out = k ? k->lease() : 0;
    if (k) k->Stop();
  }

  // A lease kept alive by a keeper; a lost lease ends leadership.
  Status EnsureLease() {
    {
      std::lock_guard lock(mu);
      if (keeper && !lease_lost) return Status::Ok();
    }
    DropKeeper(nullptr, /*stop_campaign=*/false);
    const Nanos granted_at = SteadyClock::Default().Now();
    ASSIGN_OR_RETURN(Lease lease, client->LeaseGrant(options.ttl));
    auto k = std::make_unique<LeaseKeeper>(
        client, lease, granted_at,
        LeaseKeeper::Callbacks{[this](const Status& why) {
                                 bool was_leader;
                                 {
                                   std::lock_guard lock(mu);
                                   lease_lost = true;
                                   was_leader = leader;
                                   leader = false;
                                 }
                                 cv.notify_all();
                                 if (was_leader) {
                                   log::Warn("election {}: leadership lost: {}", key,
                                             why.ToString());
                                   if (options.on_lost) options.on_lost(why);
                                 }
                               },
                               {}});
    std::lock_guard lock(mu);
    keeper = std::move(k);
    lease_lost = false;
    return Status::Ok();
  }
};

LeaderElection::LeaderElection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LeaderElection::~LeaderElection() { (void)Resign(); }

Result<std::unique_ptr<LeaderElection>> LeaderElection::Create(EtcdClient* client,
                                                               ElectionOptions options,
                                                               std::string value) {
  RETURN_IF_ERROR(CheckCoordName(options.cluster, "cluster", 64));
  if (options.ttl < kNanosPerSecond || options.ttl > 3600 * kNanosPerSecond) {
    return InvalidArgument(
        fmt::format("election ttl {:.3f} s is outside 1 s .. 1 h", ToSeconds(options.ttl)));
  }
  auto impl = std::make_unique<Impl>();
  impl->client = client;
  impl->key = LeaderKey(options.cluster);
  impl->options = std::move(options);
  impl->value = std::move(value);
  return std::unique_ptr<LeaderElection>(new LeaderElection(std::move(impl)));
}

Status LeaderElection::Campaign(Nanos timeout) {
  Impl& e = *impl_;
  const Clock& clock = SteadyClock::Default();
  const Nanos deadline = clock.Now() + timeout;
  {
    std::lock_guard lock(e.mu);
    e.stopped = false;
  }
  while (true) {
    RETURN_IF_ERROR(e.EnsureLease());
    LeaseId lease;
    {
      std::lock_guard lock(e.mu);
      if (e.leader) return Status::Ok();
      if (e.stopped || !e.keeper) {
        return Status(Code::kCancelled, fmt::format("election {}: campaign stopped by Resign or "
                                                    "Abandon",
                                                    e.key));
      }
      lease = e.keeper->lease();
      e.key_deleted = false;
    }
    ASSIGN_OR_RETURN(TxnResult txn, e.client->PutIfAbsent(e.key, e.value, lease));
    // Won, or the key is already ours (a transaction whose answer was lost and retried).
    if (txn.succeeded || (txn.current && txn.current->lease == lease)) {
      std::lock_guard lock(e.mu);
      if (e.lease_lost) continue;  // the lease died meanwhile: the key goes with it
      e.leader = true;
      e.leader_revision = txn.succeeded ? txn.revision : txn.current->mod_revision;
      log::Info("election {}: leading as '{}'", e.key, e.value);
      return Status::Ok();
    }
    // Someone else leads: wait for the key to go, watching from just after the read, so that a
    // delete between the read and the watch is not missed.
    WatchOptions watch_options;
    watch_options.start_revision = txn.revision + 1;
    watch_options.on_events = [&e](const std::vector<WatchEvent>& events) {
      for (const WatchEvent& ev : events) {
        if (ev.type == EventType::kDelete) {
          std::lock_guard lock(e.mu);
          e.key_deleted = true;
          e.cv.notify_all();
        }
      }
    };
    ASSIGN_OR_RETURN(std::unique_ptr<Watch> watch,
                     e.client->WatchKey(e.key, std::move(watch_options)));
    std::unique_lock lock(e.mu);
    const Nanos left = deadline - clock.Now();
    e.waiting = true;
    const bool woke = e.cv.wait_for(lock, std::chrono::nanoseconds(std::max<Nanos>(left, 0)),
                                    [&e] { return e.key_deleted || e.lease_lost || e.stopped; });
    e.waiting = false;
    if (!woke) {
      return Timeout(fmt::format("election {}: not leading after {:.1f} s (leader: '{}')", e.key,
                                 ToSeconds(timeout), txn.current ? txn.current->value : ""));
    }
    // The key is gone (or our lease is): campaign again. The watch ends with this scope.
  }
}

bool LeaderElection::IsCampaigning() const {
  std::lock_guard lock(impl_->mu);
  return impl_->waiting;
}

bool LeaderElection::IsLeader() const {
  std::lock_guard lock(impl_->mu);
  return impl_->leader;
}

Status LeaderElection::Resign() {
  Impl& e = *impl_;
  bool was_leader;
  int64_t revision;
  {
    std::lock_guard lock(e.mu);
    was_leader = e.leader;
    revision = e.leader_revision;
  }
  LeaseId lease = 0;
  e.DropKeeper(&lease, /*stop_campaign=*/true);
  if (lease == 0) return Status::Ok();
  Status status;
  if (was_leader) {
    // Only our own put: a successor's key has another mod_revision.
    auto deleted = e.client->DeleteIfModRevision(e.key, revision);
    if (!deleted.ok()) status = deleted.status();
  }
  Status revoked = e.client->LeaseRevoke(lease);
  if (!revoked.ok() && revoked.code() != Code::kCoordLeaseLost && status.ok()) status = revoked;
  if (was_leader) log::Info("election {}: resigned", e.key);
  return status;
}

void LeaderElection::Abandon() { impl_->DropKeeper(nullptr, /*stop_campaign=*/true); }

Result<std::optional<KeyValue>> LeaderElection::Leader() { return impl_->client->Get(impl_->key); }

Result<std::unique_ptr<Watch>> LeaderElection::Observe(
    std::function<void(const std::optional<std::string>&)> on_change) {
  ASSIGN_OR_RETURN(RangeResult now, impl_->client->Range(impl_->key));
  std::optional<std::string> current;
  // Range is a prefix read: keep only the key itself.
  for (const KeyValue& kv : now.kvs) {
    if (kv.key == impl_->key) current = kv.value;
  }
  on_change(current);
  WatchOptions options;
  options.start_revision = now.revision + 1;
  options.on_events = [on_change](const std::vector<WatchEvent>& events) {
    for (const WatchEvent& ev : events) {
      on_change(ev.type == EventType::kPut ? std::optional<std::string>(ev.kv.value)
                                           : std::nullopt);
    }
  };
  return impl_->client->WatchKey(impl_->key, std::move(options));
}

}  // namespace dualpath::coord
