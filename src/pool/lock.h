// The pool's metadata lock, in the two memory models.
//
// CoherentLock: a process-shared robust pthread mutex in the region's lock area. When a holder
// dies, the kernel hands the mutex to the next locker with EOWNERDEAD, which is how Acquire
// learns that the metadata may be half-updated and a recovery sweep must run.
//
// TwoTierLock (TraCT §3.3): for memory shared by hosts without atomics or coherence.
//  - local tier: a robust process-shared mutex in a node-local file (DRAM of this host), so at
//    most one process per node competes globally;
//  - global tier: per node, a request line written only by that node's local-lock holder
//    (request number + active bit) and a grant line written only by a lock manager (the request
//    number it granted + the manager's epoch); plain stores + clflush only;
//  - the lock manager: a thread in one attached process that grants the active request of one
//    node when no node holds a grant, and revokes the grant of a dead holder (`is_dead`),
//    flagging the lock for recovery.
//
// The manager role fails over (docs/pool.md, "Lock manager fail-over"). Every process may be a
// candidate (one per node, elected by a second node-local robust mutex). The manager bumps a
// heartbeat line every lease/8; a candidate claims the role by writing a new epoch into the claim
// line when the heartbeat stood still for a whole lease (at once: when nobody ever claimed it and
// this is the preferred manager node, when this node's own manager process died, or when the
// manager resigned on close). Two managers are never both effective: a waiter accepts a grant
// only if, read after the grant, the claim line still holds the grant's epoch (fencing), and a
// manager treats every node whose active request has a matching grant of ANY epoch as holding
// the lock, so a grant accepted from a manager that then lost the role is waited for.
//
// Every wait is bounded: Acquire fails with kTimeout naming the lock, the time waited and the
// manager's state instead of spinning forever.
//
// Thread safety: Acquire/Release may be called from any thread; the lock is not reentrant.
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "pool/flush.h"
#include "pool/layout.h"

namespace dualpath::pool::internal {

class MetaLock {
 public:
  virtual ~MetaLock() = default;
  // Waits at most `timeout` for the lock. true: a previous holder died holding it (the caller
  // must run the recovery sweep before trusting the metadata). kTimeout when not granted in time.
  virtual Result<bool> Acquire(Nanos timeout) = 0;
  virtual void Release() = 0;
  // Called by the holder after a recovery sweep.
  virtual void ClearRecovery() {}
};

// Formats the mutex at `area` (region creation only).
Status InitCoherentMutex(void* area);

class CoherentLock final : public MetaLock {
 public:
  // `name` (the region's path) is what a timeout error names.
  CoherentLock(void* area, std::string name)
      : mu_(static_cast<pthread_mutex_t*>(area)), name_(std::move(name)) {}
  Result<bool> Acquire(Nanos timeout) override;
  void Release() override;

 private:
  pthread_mutex_t* mu_;
  std::string name_;
};

// Identity of this process in the region, for the request line.
struct Holder {
  uint32_t proc_plus1;
  uint32_t gen;
};

// The lock manager as the region records it.
struct ManagerView {
  uint64_t epoch = 0;  // 0: nobody ever claimed the role
  uint32_t node = 0;
  int32_t pid = 0;
  bool resigned = false;
  uint64_t beat = 0;
};

struct TwoTierOptions {
  uint32_t num_nodes = 1;
  uint32_t node = 0;          // this process's node
  uint32_t manager_node = 0;  // preferred manager node: claims at once when nobody ever did
  std::string local_dir;      // where the node-local file lives
  std::string region_key;     // names the node-local file
  std::string name;           // the region's path, for messages
  Nanos lease = 0;            // the heartbeat may stand still this long before a takeover
  bool candidate = true;      // this process may take the manager role
};

class TwoTierLock final : public MetaLock {
 public:
  using IsDeadFn = std::function<bool(uint32_t proc_plus1, uint32_t gen)>;
  ~TwoTierLock() override;
  // `is_dead` tells the manager whether a holder died.
  static Result<std::unique_ptr<TwoTierLock>> Open(uint8_t* locks_area, const TwoTierOptions& o,
                                                   Holder self, IsDeadFn is_dead);
  Result<bool> Acquire(Nanos timeout) override;
  void Release() override;
  void ClearRecovery() override;
  // The identity written into our node's request line (set once this process has a slot).
  void SetHolder(Holder self) { self_ = self; }
  ManagerView Manager() const;

 private:
  struct NodeLocal;
  TwoTierLock() : sync_(true) {}
  RequestSlot* Request(uint32_t node) const { return requests_ + node; }
  GrantSlot* Grant(uint32_t node) const { return grants_ + node; }
  bool StillManager(uint64_t epoch) const;
  std::string ManagerText() const;
  // Waits up to `d` or until Close; false when closing.
  bool Pause(std::chrono::nanoseconds d);
  void StandbyLoop();
  // Watches the manager and claims the role when it is due; returns on Close.
  void CandidateLoop(bool predecessor_died);
  // Serves as manager under `epoch` until another claim replaces it or Close.
  void ManagerLoop(uint64_t epoch);

  Sync sync_;
  LockControl* control_ = nullptr;
  ManagerClaim* claim_ = nullptr;
  ManagerBeat* beat_ = nullptr;
  RequestSlot* requests_ = nullptr;
  GrantSlot* grants_ = nullptr;
  TwoTierOptions o_;
  Holder self_{};
  IsDeadFn is_dead_;
  NodeLocal* local_ = nullptr;
  int local_fd_ = -1;
  std::thread standby_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stop_{false};
};

}  // namespace dualpath::pool::internal
