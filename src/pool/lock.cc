#include "pool/lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "dualpath/common/check.h"
#include "dualpath/common/log.h"
#include "pool/fault.h"

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

// Locks a robust mutex, waiting at most `timeout`; true if the previous owner died holding it,
// kTimeout (naming `what`) if it was not acquired in time.
Result<bool> LockRobustWithin(pthread_mutex_t* mu, Nanos timeout, const std::string& what) {
  // pthread_mutex_timedlock takes a CLOCK_REALTIME deadline (the monotonic clocklock variant is
  // not intercepted by ThreadSanitizer); a clock step only stretches or shortens this one wait.
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const Nanos deadline = ts.tv_sec * kNanosPerSecond + ts.tv_nsec + timeout;
  ts.tv_sec = deadline / kNanosPerSecond;
  ts.tv_nsec = deadline % kNanosPerSecond;
  const int rc = pthread_mutex_timedlock(mu, &ts);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(mu);
    return true;
  }
  if (rc == ETIMEDOUT) {
    return Status(Code::kTimeout, fmt::format("{}: not acquired within {} ms: its holder is alive "
                                              "and has not released it",
                                              what, timeout / kNanosPerMilli));
  }
  DUALPATH_CHECK(rc == 0, fmt::format("pthread_mutex_timedlock: {}", std::strerror(rc)));
  return false;
}

Nanos SteadyNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

Result<bool> CoherentLock::Acquire(Nanos timeout) {
  return LockRobustWithin(mu_, timeout,
                          fmt::format("pool {}: metadata lock (coherent mutex)", name_));
}
void CoherentLock::Release() { pthread_mutex_unlock(mu_); }

// Node-local (DRAM) state shared by the processes of one node.
struct TwoTierLock::NodeLocal {
  uint64_t magic;
  alignas(64) pthread_mutex_t local_lock;
  alignas(64) pthread_mutex_t manager_mutex;  // held by the node's manager candidate
};

Result<std::unique_ptr<TwoTierLock>> TwoTierLock::Open(uint8_t* locks_area, const TwoTierOptions& o,
                                                       Holder self, IsDeadFn is_dead) {
  if (o.node >= o.num_nodes || o.manager_node >= o.num_nodes) {
    return InvalidArgument(
        fmt::format("node {} / manager node {} out of range (region has {} nodes)", o.node,
                    o.manager_node, o.num_nodes));
  }
  if (o.num_nodes >= (1u << kEpochNodeBits)) {
    return InvalidArgument(fmt::format("{} nodes: at most {}", o.num_nodes, 1u << kEpochNodeBits));
  }
  std::unique_ptr<TwoTierLock> l(new TwoTierLock());
  uint8_t* p = locks_area + kMutexAreaBytes;
  l->control_ = reinterpret_cast<LockControl*>(p);
  p += sizeof(LockControl);
  l->claim_ = reinterpret_cast<ManagerClaim*>(p);
  p += sizeof(ManagerClaim);
  l->beat_ = reinterpret_cast<ManagerBeat*>(p);
  p += sizeof(ManagerBeat);
  l->requests_ = reinterpret_cast<RequestSlot*>(p);
  p += uint64_t{o.num_nodes} * sizeof(RequestSlot);
  l->grants_ = reinterpret_cast<GrantSlot*>(p);
  l->o_ = o;
  l->self_ = self;
  l->is_dead_ = std::move(is_dead);

  const std::string path =
      fmt::format("{}/dualpath-pool-{}-node{}.lock", o.local_dir, o.region_key, o.node);
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
  void* m = mmap(nullptr, sizeof(NodeLocal), PROT_READ | PROT_WRITE, MAP_SHARED, l->local_fd_, 0);
  if (m == MAP_FAILED) {
    flock(l->local_fd_, LOCK_UN);
    return ErrnoStatus("mmap " + path, errno);
  }
  l->local_ = static_cast<NodeLocal*>(m);
  Status init;
  if (l->local_->magic != kNodeLocalMagic) {
    init = InitRobustMutex(&l->local_->local_lock);
    if (init.ok()) init = InitRobustMutex(&l->local_->manager_mutex);
    if (init.ok()) l->local_->magic = kNodeLocalMagic;
  }
  flock(l->local_fd_, LOCK_UN);
  RETURN_IF_ERROR(init);
  if (o.candidate) {
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

ManagerView TwoTierLock::Manager() const {
  sync_.Fresh(claim_);
  sync_.Fresh(beat_);
  ManagerView v;
  v.epoch = Ld(claim_->epoch);
  v.node = Ld(claim_->node);
  v.pid = Ld(claim_->pid);
  v.resigned = Ld(claim_->resigned) != 0;
  v.beat = Ld(beat_->beat);
  return v;
}

std::string TwoTierLock::ManagerText() const {
  const ManagerView v = Manager();
  if (v.epoch == 0) {
    return fmt::format(
        "no process has taken the lock-manager role: one opened on node {} takes it at once, one "
        "on any other node after the {} ms lease",
        o_.manager_node, o_.lease / kNanosPerMilli);
  }
  return fmt::format(
      "lock manager: epoch {} on node {} (pid {}){}, heartbeat {}; another node's "
      "process takes the role {} ms after the heartbeat stops",
      v.epoch >> kEpochNodeBits, v.node, v.pid, v.resigned ? ", resigned" : "", v.beat,
      o_.lease / kNanosPerMilli);
}

Result<bool> TwoTierLock::Acquire(Nanos timeout) {
  const Nanos start = SteadyNow();
  const std::string what =
      fmt::format("pool {}: metadata lock (node {}'s local tier)", o_.name, o_.node);
  ASSIGN_OR_RETURN(const bool inherited, LockRobustWithin(&local_->local_lock, timeout, what));
  RequestSlot* req = Request(o_.node);
  GrantSlot* grant = Grant(o_.node);
  if (inherited) {
    // A process of this node died holding the local lock, maybe holding (or just granted) the
    // global one. Our new request number below supersedes its request, so no manager counts its
    // grant as held any more; the next holder, us or another node, runs the sweep first.
    St(control_->recovery_needed, uint64_t{1});
    sync_.Publish(control_);
  }
  sync_.Fresh(req);
  uint64_t seq = (Ld(req->request) >> 1) + 1;
  St(req->holder_plus1, self_.proc_plus1);
  St(req->holder_gen, self_.gen);
  St(req->request, (seq << 1) | kRequestActive);
  sync_.Publish(req);
  uint32_t spins = 0;
  for (;;) {
    sync_.Fresh(grant);
    const uint64_t g = Ld(grant->grant);
    if (g != 0 && (g & kGrantSeqMask) == (seq & kGrantSeqMask)) {
      // Fencing: the grant counts only if its manager still holds the role, read after the grant.
      // A manager that lost the role may still write one grant it had decided on; such a grant
      // is refused by asking again under a new number (which also tells every manager that this
      // node does not hold the lock).
      sync_.Fresh(claim_);
      if (Ld(claim_->epoch) == (g >> kGrantSeqBits)) break;
      ++seq;
      St(req->request, (seq << 1) | kRequestActive);
      sync_.Publish(req);
      continue;
    }
    if (SteadyNow() - start >= timeout) {
      // Withdraw: inactive, and under a number no grant was written for, so a grant that races
      // in now is never taken for a holder.
      St(req->request, (seq + 1) << 1);
      sync_.Publish(req);
      pthread_mutex_unlock(&local_->local_lock);
      return Status(Code::kTimeout,
                    fmt::format("pool {}: metadata lock not granted to node {} within {} ms ({})",
                                o_.name, o_.node, timeout / kNanosPerMilli, ManagerText()));
    }
    Backoff(spins);
  }
  sync_.Fresh(control_);
  return inherited || Ld(control_->recovery_needed) != 0;
}

void TwoTierLock::ClearRecovery() {
  St(control_->recovery_needed, uint64_t{0});
  sync_.Publish(control_);
}

void TwoTierLock::Release() {
  RequestSlot* req = Request(o_.node);
  St(req->request, Ld(req->request) & ~kRequestActive);  // our own line: no Fresh needed
  sync_.Publish(req);
  pthread_mutex_unlock(&local_->local_lock);
}

bool TwoTierLock::Pause(std::chrono::nanoseconds d) {
  std::unique_lock<std::mutex> g(stop_mu_);
  return !stop_cv_.wait_for(g, d, [this] { return stop_.load(); });
}

void TwoTierLock::StandbyLoop() {
  // Become this node's candidate when the node's current one (if any) goes away. trylock + a
  // short wait on the stop condition keeps Close prompt.
  while (!stop_.load()) {
    int rc = pthread_mutex_trylock(&local_->manager_mutex);
    bool predecessor_died = false;
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(&local_->manager_mutex);
      predecessor_died = true;
      rc = 0;
    }
    if (rc == 0) {
      CandidateLoop(predecessor_died);
      pthread_mutex_unlock(&local_->manager_mutex);
      return;
    }
    if (!Pause(std::chrono::milliseconds(20))) return;
  }
}

bool TwoTierLock::StillManager(uint64_t epoch) const {
  sync_.Fresh(claim_);
  return Ld(claim_->epoch) == epoch;
}

void TwoTierLock::CandidateLoop(bool predecessor_died) {
  // The heartbeat is judged by OUR clock (how long it has not changed), so hosts need not agree
  // on the time for a takeover.
  const auto poll = std::chrono::nanoseconds(std::min<Nanos>(o_.lease / 8, 20 * kNanosPerMilli));
  uint64_t seen_epoch = ~uint64_t{0}, seen_beat = ~uint64_t{0};
  Nanos since = SteadyNow();
  while (!stop_.load()) {
    const ManagerView v = Manager();
    const Nanos now = SteadyNow();
    if (v.epoch != seen_epoch || v.beat != seen_beat) {
      seen_epoch = v.epoch;
      seen_beat = v.beat;
      since = now;
    }
    const bool stale = now - since >= o_.lease;
    bool claim;
    if (v.epoch == 0) {
      claim = o_.node == o_.manager_node || stale;  // nobody ever managed: the preferred node first
    } else {
      // Our node's manager process died (we inherited the election mutex from it): it can grant
      // nothing any more, so no need to wait out its lease.
      claim = v.resigned || stale || (predecessor_died && v.node == o_.node);
    }
    predecessor_died = false;
    if (claim) {
      const uint64_t mine = (((v.epoch >> kEpochNodeBits) + 1) << kEpochNodeBits) | o_.node;
      St(claim_->epoch, mine);
      St(claim_->node, o_.node);
      St(claim_->pid, static_cast<int32_t>(getpid()));
      St(claim_->resigned, 0u);
      sync_.Publish(claim_);
      if (v.epoch != 0 && v.resigned) {
        log::Info("pool {}: node {} took the lock-manager role on from node {} (epoch {})", o_.name,
                  o_.node, v.node, mine >> kEpochNodeBits);
      } else if (v.epoch != 0) {
        log::Warn("pool {}: node {} took the lock-manager role over from node {} (epoch {})",
                  o_.name, o_.node, v.node, mine >> kEpochNodeBits);
      }
      ManagerLoop(mine);
      if (stop_.load() && StillManager(mine)) {
        // Closing: hand the role on now instead of after a lease of silence.
        St(claim_->resigned, 1u);
        sync_.Publish(claim_);
      }
      seen_epoch = ~uint64_t{0};
      continue;
    }
    if (!Pause(poll)) return;
  }
}

void TwoTierLock::ManagerLoop(uint64_t epoch) {
  const Nanos beat_period = std::max<Nanos>(o_.lease / 8, kNanosPerMicro);
  Nanos last_beat = 0;
  uint64_t beat = 0;
  uint32_t next = 0;        // round-robin start, for fairness between nodes
  uint32_t idle_scans = 0;  // consecutive scans with nothing to do
  uint32_t busy_scans = 0;  // consecutive scans while a grant is outstanding
  Nanos dead_checked = 0;   // when the current holder's liveness was last checked
  int64_t granted = -1;     // node holding the current grant (as far as we know)
  while (!stop_.load(std::memory_order_relaxed)) {
    const Nanos now = SteadyNow();
    if (now - last_beat >= beat_period) {
      // Another claim replaced ours (we were stalled past the lease): step down.
      if (!StillManager(epoch)) {
        log::Warn("pool {}: node {} lost the lock-manager role (epoch {})", o_.name, o_.node,
                  epoch >> kEpochNodeBits);
        return;
      }
      sync_.Fresh(beat_);
      beat = Ld(beat_->beat) + 1;
      St(beat_->beat, beat);
      sync_.Publish(beat_);
      last_beat = now;
    }
    // A node holds the lock when its active request has a matching grant of any epoch: a grant
    // from a manager that lost the role may have been accepted before the role changed hands.
    int64_t held = -1;
    int64_t waiting = -1;
    uint64_t waiting_seq = 0;
    for (uint32_t i = 0; i < o_.num_nodes; ++i) {
      const uint32_t n = (next + i) % o_.num_nodes;
      RequestSlot* r = Request(n);
      sync_.Fresh(r);
      const uint64_t req = Ld(r->request);
      if ((req & kRequestActive) == 0) continue;
      GrantSlot* g = Grant(n);
      sync_.Fresh(g);
      const uint64_t gv = Ld(g->grant);
      if (gv != 0 && (gv & kGrantSeqMask) == ((req >> 1) & kGrantSeqMask)) {
        held = n;
        break;
      }
      if (waiting < 0) {
        waiting = n;
        waiting_seq = req >> 1;
      }
    }
    bool worked = false;
    if (held >= 0) {
      if (held != granted) dead_checked = now;
      granted = held;
      // A grant held for long: check (every 20 ms: /proc reads are not free, and critical
      // sections take microseconds) whether its holder is dead. By time, not by scan count: on a
      // loaded machine every scan yields the CPU, and a count could outlast the waiters' bound.
      if (now - dead_checked >= 20 * kNanosPerMilli) {
        dead_checked = now;
        RequestSlot* r = Request(static_cast<uint32_t>(held));
        if (is_dead_(Ld(r->holder_plus1), Ld(r->holder_gen))) {
          log::Warn("pool lock manager: revoking node {}'s grant (holder dead)", held);
          St(control_->recovery_needed, uint64_t{1});
          sync_.Publish(control_);
          GrantSlot* g = Grant(static_cast<uint32_t>(held));
          St(g->grant, uint64_t{0});
          sync_.Publish(g);
          worked = true;
        }
      }
    } else if (waiting >= 0) {
      // The last check before the grant: a manager stalled past its lease must not grant under
      // its old epoch (and if it stalls after this check, the waiter's fencing refuses it).
      if (!StillManager(epoch)) {
        log::Warn("pool {}: node {} lost the lock-manager role (epoch {})", o_.name, o_.node,
                  epoch >> kEpochNodeBits);
        return;
      }
      FaultPoint("manager.grant");  // tests stall or kill the manager here: the worst instant
      GrantSlot* g = Grant(static_cast<uint32_t>(waiting));
      St(g->grant, (epoch << kGrantSeqBits) | (waiting_seq & kGrantSeqMask));
      sync_.Publish(g);
      FaultPoint("manager.granted");
      next = static_cast<uint32_t>(waiting) + 1;
      granted = waiting;
      dead_checked = now;
      worked = true;
    }
    if (worked || held >= 0) {
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
      Pause(std::chrono::microseconds(100));
    }
  }
}

}  // namespace dualpath::pool::internal
