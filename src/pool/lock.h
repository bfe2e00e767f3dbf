// The pool's metadata lock, in the two memory models.
//
// CoherentLock: a process-shared robust pthread mutex in the region's lock area. When a holder
// dies, the kernel hands the mutex to the next locker with EOWNERDEAD, which is how Acquire
// learns that the metadata may be half-updated and a recovery sweep must run.
//
// TwoTierLock (TraCT §3.3): for memory shared by hosts without atomics or coherence.
//  - local tier: a robust process-shared mutex in a node-local file (DRAM of this host), so at
//    most one process per node competes globally;
//  - global tier: one slot per node in the region (IDLE / WAITING / LOCKED), written only with
//    plain stores + clflush: the node's local-lock holder writes WAITING and IDLE, the lock
//    manager writes LOCKED;
//  - the lock manager: a thread in one process of the manager node (elected through a second
//    robust node-local mutex, so a standby takes over when the manager dies) that grants the slot
//    of one WAITING node when none is LOCKED, and revokes the grant of a dead holder (its lease:
//    `is_dead`), flagging the lock for recovery.
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

#include "dualpath/common/status.h"
#include "pool/flush.h"
#include "pool/layout.h"

namespace dualpath::pool::internal {

class MetaLock {
 public:
  virtual ~MetaLock() = default;
  // Blocks until held. Returns true when a previous holder died holding it (the caller must run
  // the recovery sweep before trusting the metadata).
  virtual bool Acquire() = 0;
  virtual void Release() = 0;
  // Called by the holder after a recovery sweep.
  virtual void ClearRecovery() {}
};

// Formats the mutex at `area` (region creation only).
Status InitCoherentMutex(void* area);

class CoherentLock final : public MetaLock {
 public:
  explicit CoherentLock(void* area) : mu_(static_cast<pthread_mutex_t*>(area)) {}
  bool Acquire() override;
  void Release() override;

 private:
  pthread_mutex_t* mu_;
};

// Identity of this process in the region, for the global slot.
struct Holder {
  uint32_t proc_plus1;
  uint32_t gen;
};

class TwoTierLock final : public MetaLock {
 public:
  using IsDeadFn = std::function<bool(uint32_t proc_plus1, uint32_t gen)>;
  ~TwoTierLock() override;
  // `region_key` names the node-local file; `is_dead` tells the manager whether a holder died.
  static Result<std::unique_ptr<TwoTierLock>> Open(uint8_t* locks_area, uint32_t num_nodes,
                                                   uint32_t node, uint32_t manager_node,
                                                   const std::string& local_dir,
                                                   const std::string& region_key, Holder self,
                                                   IsDeadFn is_dead);
  bool Acquire() override;
  void Release() override;
  void ClearRecovery() override;
  // The identity written into our node's slot (set once this process has a process slot).
  void SetHolder(Holder self) { self_ = self; }

 private:
  struct NodeLocal;
  TwoTierLock() : sync_(true) {}
  GlobalSlot* Slot(uint32_t node) const;
  void StandbyLoop();
  void ManagerLoop();

  Sync sync_;
  LockControl* control_ = nullptr;
  uint8_t* slots_ = nullptr;
  uint32_t num_nodes_ = 0;
  uint32_t node_ = 0;
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
