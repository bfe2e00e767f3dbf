#include "pool/lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "dualpath/common/check.h"
#include "dualpath/common/log.h"

namespace dualpath::pool::internal {
namespace {

Status InitRobustMutex(pthread_mutex_t* mu) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(mu, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return ErrnoStatus("pthread_mutex_init", rc);
  return Status::Ok();
}

// Locks a robust mutex; returns true if the previous owner died holding it.
bool LockRobust(pthread_mutex_t* mu) {
  int rc = pthread_mutex_lock(mu);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(mu);
    return true;
  }
  DUALPATH_CHECK(rc == 0, fmt::format("pthread_mutex_lock: {}", std::strerror(rc)));
  return false;
}

// Spin politely: pause first, then yield the CPU (the machine may be oversubscribed).
void Backoff(uint32_t& spins) {
  ++spins;
  if (spins < 64) {
    _mm_pause();
  } else {
    sched_yield();
  }
}

constexpr uint64_t kNodeLocalMagic = 0x4B434F4C4C505044ull;  // "DPPLLOCK"

}  // namespace

Status InitCoherentMutex(void* area) {
  static_assert(sizeof(pthread_mutex_t) <= kMutexAreaBytes);
  return InitRobustMutex(static_cast<pthread_mutex_t*>(area));
}

bool CoherentLock::Acquire() { return LockRobust(mu_); }
void CoherentLock::Release() { pthread_mutex_unlock(mu_); }

// Node-local (DRAM) state shared by the processes of one node.
struct TwoTierLock::NodeLocal {
  uint64_t magic;
  alignas(64) pthread_mutex_t local_lock;
  alignas(64) pthread_mutex_t manager_mutex;
};

GlobalSlot* TwoTierLock::Slot(uint32_t node) const {
  return reinterpret_cast<GlobalSlot*>(slots_ + node * sizeof(GlobalSlot));
}

Result<std::unique_ptr<TwoTierLock>> TwoTierLock::Open(uint8_t* locks_area, uint32_t num_nodes,
                                                       uint32_t node, uint32_t manager_node,
                                                       const std::string& local_dir,
                                                       const std::string& region_key, Holder self,
                                                       IsDeadFn is_dead) {
  if (node >= num_nodes || manager_node >= num_nodes) {
    return InvalidArgument(
        fmt::format("node {} / manager node {} out of range (region has {} nodes)", node,
                    manager_node, num_nodes));
  }
  std::unique_ptr<TwoTierLock> l(new TwoTierLock());
  l->control_ = reinterpret_cast<LockControl*>(locks_area + kMutexAreaBytes);
  l->slots_ = locks_area + kMutexAreaBytes + sizeof(LockControl);
  l->num_nodes_ = num_nodes;
  l->node_ = node;
  l->self_ = self;
  l->is_dead_ = std::move(is_dead);

  const std::string path =
      fmt::format("{}/dualpath-pool-{}-node{}.lock", local_dir, region_key, node);
  l->local_fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (l->local_fd_ < 0) return ErrnoStatus(fmt::format("open node-local lock {}", path), errno);
  // Initialization race between processes of one node: serialize with flock, init once.
  if (flock(l->local_fd_, LOCK_EX) != 0) return ErrnoStatus("flock " + path, errno);
  // Size and back the file in one step (idempotent): a sparse page of a full tmpfs would be
  // SIGBUS at the first store through the mapping below, instead of this error.
  if (const int rc = posix_fallocate(l->local_fd_, 0, sizeof(NodeLocal)); rc != 0) {
    flock(l->local_fd_, LOCK_UN);
    return ErrnoStatus("reserve " + path, rc);
  }
  void* p = mmap(nullptr, sizeof(NodeLocal), PROT_READ | PROT_WRITE, MAP_SHARED, l->local_fd_, 0);
  if (p == MAP_FAILED) {
    flock(l->local_fd_, LOCK_UN);
    return ErrnoStatus("mmap " + path, errno);
  }
  l->local_ = static_cast<NodeLocal*>(p);
  Status init;
  if (l->local_->magic != kNodeLocalMagic) {
    init = InitRobustMutex(&l->local_->local_lock);
    if (init.ok()) init = InitRobustMutex(&l->local_->manager_mutex);
    if (init.ok()) l->local_->magic = kNodeLocalMagic;
  }
  flock(l->local_fd_, LOCK_UN);
  RETURN_IF_ERROR(init);
  if (node == manager_node) {
    l->standby_ = std::thread([raw = l.get()] { raw->StandbyLoop(); });
  }
  return l;
}

TwoTierLock::~TwoTierLock() {
  {
    std::lock_guard<std::mutex> g(stop_mu_);
    stop_.store(true);
  }
  stop_cv_.notify_all();
  if (standby_.joinable()) standby_.join();
  if (local_ != nullptr) munmap(local_, sizeof(NodeLocal));
  if (local_fd_ >= 0) close(local_fd_);
}

bool TwoTierLock::Acquire() {
  bool recovery = LockRobust(&local_->local_lock);
  GlobalSlot* slot = Slot(node_);
  sync_.Fresh(slot);
  if (recovery && Ld(slot->state) == kSlotLocked) {
    // A process of this node died holding (or just being granted) the global lock: give the
    // grant back instead of inheriting it, so the manager stays the only writer of LOCKED, and
    // flag the metadata for recovery. The next grant, ours or another node's, runs the sweep.
    St(control_->recovery_needed, uint64_t{1});
    sync_.Publish(control_);
    St(slot->state, uint64_t{kSlotIdle});
    sync_.Publish(slot);
  }
  St(slot->holder_plus1, self_.proc_plus1);
  St(slot->holder_gen, self_.gen);
  St(slot->state, uint64_t{kSlotWaiting});
  sync_.Publish(slot);
  uint32_t spins = 0;
  for (;;) {
    sync_.Fresh(slot);
    const uint64_t s = Ld(slot->state);
    if (s == kSlotLocked) break;
    if (s == kSlotIdle) {
      // The manager revoked a dead predecessor's grant after we asked: ask again. (Writing
      // WAITING over a grant that raced in is harmless: we never saw LOCKED, and the manager
      // grants again since no slot is LOCKED.)
      St(slot->state, uint64_t{kSlotWaiting});
      sync_.Publish(slot);
    }
    Backoff(spins);
  }
  sync_.Fresh(control_);
  return recovery || Ld(control_->recovery_needed) != 0;
}

void TwoTierLock::ClearRecovery() {
  St(control_->recovery_needed, uint64_t{0});
  sync_.Publish(control_);
}

void TwoTierLock::Release() {
  GlobalSlot* slot = Slot(node_);
  St(slot->state, uint64_t{kSlotIdle});
  sync_.Publish(slot);
  pthread_mutex_unlock(&local_->local_lock);
}

void TwoTierLock::StandbyLoop() {
  // Become the manager when the node's current manager (if any) goes away. trylock + a short
  // wait on the stop condition keeps Close prompt.
  while (!stop_.load()) {
    int rc = pthread_mutex_trylock(&local_->manager_mutex);
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(&local_->manager_mutex);
      rc = 0;
    }
    if (rc == 0) {
      ManagerLoop();
      pthread_mutex_unlock(&local_->manager_mutex);
      return;
    }
    std::unique_lock<std::mutex> g(stop_mu_);
    stop_cv_.wait_for(g, std::chrono::milliseconds(20), [this] { return stop_.load(); });
  }
}

void TwoTierLock::ManagerLoop() {
  uint32_t next = 0;        // round-robin start, for fairness between nodes
  uint32_t idle_scans = 0;  // consecutive scans with nothing to do
  uint32_t busy_scans = 0;  // consecutive scans while a grant is outstanding
  uint64_t same_grant_scans = 0;
  int64_t granted = -1;  // node holding the current grant (as far as we know)
  while (!stop_.load(std::memory_order_relaxed)) {
    int64_t locked = -1;
    for (uint32_t n = 0; n < num_nodes_; ++n) {
      GlobalSlot* s = Slot(n);
      sync_.Fresh(s);
      if (Ld(s->state) == kSlotLocked) {
        locked = n;
        break;
      }
    }
    bool worked = false;
    if (locked >= 0) {
      same_grant_scans = (locked == granted) ? same_grant_scans + 1 : 0;
      granted = locked;
      // A long-held grant: check (rarely: /proc reads are not free) whether its holder is dead.
      if (same_grant_scans % 4096 == 4095) {
        GlobalSlot* s = Slot(static_cast<uint32_t>(locked));
        if (is_dead_(Ld(s->holder_plus1), Ld(s->holder_gen))) {
          log::Warn("pool lock manager: revoking node {}'s grant (holder dead)", locked);
          St(control_->recovery_needed, uint64_t{1});
          sync_.Publish(control_);
          St(s->state, uint64_t{kSlotIdle});
          sync_.Publish(s);
          worked = true;
        }
      }
    } else {
      for (uint32_t i = 0; i < num_nodes_; ++i) {
        const uint32_t n = (next + i) % num_nodes_;
        GlobalSlot* s = Slot(n);
        if (Ld(s->state) == kSlotWaiting) {
          St(s->state, uint64_t{kSlotLocked});
          sync_.Publish(s);
          next = n + 1;
          granted = n;
          same_grant_scans = 0;
          worked = true;
          break;
        }
      }
    }
    if (worked || locked >= 0) {
      // A grant is outstanding: its release is what we wait for. Critical sections are short, so
      // spin first (the next grant follows the release within a scan), then yield the CPU.
      idle_scans = 0;
      busy_scans = worked ? 0 : busy_scans + 1;
      if (busy_scans < 128) {
        _mm_pause();
      } else {
        sched_yield();
      }
      continue;
    }
    busy_scans = 0;
    // Nothing to grant: back off from pause to yield to a short sleep, so an idle manager does
    // not burn a core.
    ++idle_scans;
    if (idle_scans < 256) {
      _mm_pause();
    } else if (idle_scans < 4096) {
      sched_yield();
    } else {
      std::unique_lock<std::mutex> g(stop_mu_);
      stop_cv_.wait_for(g, std::chrono::microseconds(100), [this] { return stop_.load(); });
    }
  }
}

}  // namespace dualpath::pool::internal
