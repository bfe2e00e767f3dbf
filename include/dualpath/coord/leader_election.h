// coord::LeaderElection: one leader among a cluster's candidates (the store's masters), decided
// by etcd (docs/coord.md).
//
// The leader is whoever holds the key /dualpath/<cluster>/leader. A candidate campaigns with a
// lease of `ttl` and one transaction: "if the key's create_revision is 0 (it does not exist), put
// it with my value under my lease, else read it". The transaction is atomic in etcd, so at most one
// candidate wins; the others watch the key and try again when it is deleted, which happens when
// the leader resigns (it deletes the key) or dies (its lease expires: at most `ttl` after its last
// keep-alive). The value is the candidate's choice, typically the address where it serves, so
// that clients find the leader by reading (Leader) or watching (Observe) the key.
//
// A leader loses leadership (IsLeader() turns false, on_lost is called) when its lease is lost:
// etcd says it expired, or no keep-alive was answered for a whole TTL (after which etcd may have
// let another candidate win; see lease_keeper.h). It does not campaign again by itself.
//
// Thread safety: every method may be called from any thread; Campaign blocks its caller. on_lost
// runs on an internal thread (the lease keeper's) and must neither destroy the LeaderElection nor
// call its Campaign, Resign or Abandon (hand that to another thread). The EtcdClient must outlive
// the LeaderElection and its observers.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/coord/etcd_client.h"

namespace dualpath::coord {

struct ElectionOptions {
  // The cluster's name: [A-Za-z0-9._-], 1..64 characters.
  std::string cluster;
  // The candidate's lease TTL: how long a dead leader holds the key at most. 1 s .. 1 h.
  Nanos ttl = 10 * kNanosPerSecond;
  // Called once each time leadership is lost without Resign (on an internal thread).
  std::function<void(const Status&)> on_lost;
};

class LeaderElection {
 public:
  // `value` is what followers read as the leader (an address). Checks the options.
  static Result<std::unique_ptr<LeaderElection>> Create(EtcdClient* client, ElectionOptions options,
                                                        std::string value);
  ~LeaderElection();  // Resign (best effort)
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Blocks until this candidate leads (Ok; at once if it already does), or `timeout` passed
  // (kTimeout; it may campaign again), or Resign/Abandon was called meanwhile from another thread
  // (kCancelled), or etcd failed (its error).
  Status Campaign(Nanos timeout);
  // Whether this candidate leads, as far as this process knows.
  bool IsLeader() const;
  // Whether a Campaign is waiting for another candidate's key to go (a standby).
  bool IsCampaigning() const;
  // Gives up leadership (deletes the key if it is still ours) and the lease. Ok if not leading.
  Status Resign();
  // Stops keeping the lease alive without telling etcd, as a crash would: another candidate
  // takes over when the lease expires. For tests.
  void Abandon();

  // The current leader's key (value and revisions), or nullopt when there is none.
  Result<std::optional<KeyValue>> Leader();
  // Calls `on_change` with the current leader's value (nullopt: none) now, and again each time
  // the key changes, until the watch is destroyed.
  Result<std::unique_ptr<Watch>> Observe(
      std::function<void(const std::optional<std::string>&)> on_change);

  static std::string LeaderKey(const std::string& cluster);

  struct Impl;

 private:
  explicit LeaderElection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dualpath::coord
