// LeaseKeeper: keeps one etcd lease alive from a thread of its own, the part Membership and
// LeaderElection share. Every ttl/3 (etcd's own client uses the same interval) it sends one
// keep-alive on a LeaseKeepAlive stream (EtcdClient::OpenKeepAlive) and reads etcd's answer, which
// restarts the lease's TTL. A broken stream is re-opened; a failed keep-alive is retried every
// min(ttl/3, 500 ms).
//
// The lease is reported lost (on_lost, once; the keeper then stops) when
//   - etcd answers that it no longer knows the lease (kCoordLeaseLost: it expired or was
//     revoked, or etcd came back without its data), or
//   - no keep-alive was answered for a whole TTL (kCoordLeaseLost "unconfirmed for N s"): etcd
//     may have expired the lease meanwhile, and a leader must not go on believing it leads.
//     The TTL is counted from when the last answered keep-alive (or the grant) was *sent*: etcd
//     restarted the TTL after that instant, so the keeper gives the lease up no later than etcd
//     can expire it.
// on_recovered is called when a keep-alive is answered after one or more failed ones (etcd was
// away and came back with the lease): the owner then checks that its keys are still there.
//
// Thread safety: the callbacks run on the keeper's thread and must not destroy the keeper; Stop
// (and the destructor) may be called from any other thread and join it. Stop never revokes the
// lease: the owner does that, or lets it expire (what a crash looks like to the others).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "dualpath/coord/etcd_client.h"

namespace dualpath::coord {

class LeaseKeeper {
 public:
  struct Callbacks {
    std::function<void(const Status&)> on_lost;
    std::function<void()> on_recovered;
  };

  // Starts keeping `lease` (as LeaseGrant returned it) alive. `granted_at` is the steady-clock
  // time (SteadyClock::Default()) just before LeaseGrant was sent. `client` must outlive the
  // keeper.
  LeaseKeeper(EtcdClient* client, Lease lease, Nanos granted_at, Callbacks callbacks);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void Stop();

  LeaseId lease() const { return lease_.id; }
  int64_t keepalives() const { return keepalives_.load(); }  // answered keep-alives
  int64_t failures() const { return failures_.load(); }      // failed keep-alives

 private:
  void Loop();
  // Waits up to `delay` unless stopped; false when stopped.
  bool Pause(Nanos delay);

  EtcdClient* client_;
  const Lease lease_;
  const Nanos granted_at_;
  const Callbacks callbacks_;
  std::atomic<int64_t> keepalives_{0};
  std::atomic<int64_t> failures_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dualpath::coord
