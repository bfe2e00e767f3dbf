// The lock manager's failure (issue 29, step 1): the manager role fails over to another node's
// process, a grant from a manager that lost the role is refused (fencing), and every wait for the
// metadata lock is bounded by OpenOptions::lock_timeout with an error naming the lock.
//
// Processes stand in for hosts: each worker opens the region as a different node id. The "no two
// holders" invariant is checked by every process at the fault points that bracket the critical
// section (lock.acquired / lock.releasing), on a word in an anonymous shared mapping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/pool/pool.h"
#include "pool/fault.h"
#include "pool/layout.h"
#include "pool/test_util.h"

namespace dualpath::pool {
namespace {

using testing::Checksum;
using testing::FillPayload;
using testing::MakeHash;
using testing::TempDir;

constexpr int kWorkers = 2;
constexpr uint64_t kOpsPerWorker = 400;

// Shared by the test and its children (MAP_SHARED | MAP_ANONYMOUS, inherited across fork).
struct Shared {
  std::atomic<int32_t> occupant;  // pid inside the critical section, 0 if none
  std::atomic<uint64_t> violations;
  std::atomic<uint64_t> mismatches;
  std::atomic<uint64_t> timeouts;  // lock waits that ended in kTimeout (then retried)
  std::atomic<uint64_t> other_errors;
  std::atomic<uint64_t> ops;          // operations completed, all workers
  std::atomic<uint64_t> grants;       // grants written by the doomed manager
  std::atomic<uint64_t> final_epoch;  // the manager seen by the workers at the end
  std::atomic<uint32_t> final_node;
  std::atomic<int32_t> final_pid;
  std::atomic<int32_t> doomed;  // pid of the process that killed itself at its doom point
  char last_error[256];
};

Shared* g_shared = nullptr;
uint64_t g_doom_at = 0;  // the doomed manager's grant at which it dies (or stops)
int g_doom_signal = 0;   // SIGKILL or SIGSTOP
const char* g_doom_point = nullptr;

// True when `pid` can hold nothing any more: gone, or a zombie not yet reaped.
bool Gone(int32_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const char* rp = std::strrchr(buf, ')');
  return n == 0 || rp == nullptr || rp[2] == 'Z';
}

// Every process: the critical-section invariant (a mark left by a holder that died inside is
// not an overlap). The doomed process: dies or stops at its point.
void Hook(const char* point) {
  const auto pid = static_cast<int32_t>(getpid());
  if (std::strcmp(point, "lock.acquired") == 0) {
    // A mark left by the process that killed itself inside the lock is stale (the kernel hands
    // the robust mutex on before /proc shows the process as a zombie: hence `doomed`).
    const int32_t before = g_shared->occupant.exchange(pid);
    if (before != 0 && before != g_shared->doomed.load() && !Gone(before)) {
      g_shared->violations.fetch_add(1);
    }
  } else if (std::strcmp(point, "lock.releasing") == 0) {
    int32_t expected = pid;
    if (!g_shared->occupant.compare_exchange_strong(expected, 0)) {
      g_shared->violations.fetch_add(1);
    }
  }
  if (g_doom_point != nullptr && std::strcmp(point, g_doom_point) == 0) {
    if (g_shared->grants.fetch_add(1) + 1 == g_doom_at) {
      if (g_doom_signal == SIGKILL) g_shared->doomed.store(pid);
      raise(g_doom_signal);
    }
  }
}

Shared* MapShared() {
  void* p =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Shared{};
}

Geometry SmallGeometry(MemoryModel model) {
  Geometry g;
  g.chunk_bytes = 64 << 10;
  g.region_bytes = 8 << 20;
  g.max_procs = 8;
  g.pin_records = 16;
  g.num_nodes = 3;
  g.lease = 200 * kNanosPerMilli;  // takeover after 200 ms of silent heartbeat
  g.model = model;
  return g;
}

void RecordError(const Status& s) {
  g_shared->other_errors.fetch_add(1);
  std::snprintf(g_shared->last_error, sizeof(g_shared->last_error), "%s", s.ToString().c_str());
  // A lock that stays out of reach through every re-submission: the role never moved. Stop
  // here (a worker that went on would take 10 lock timeouts per operation).
  if (s.code() == Code::kTimeout) _exit(5);
}

Code CodeOf(const Status& s) { return s.code(); }
template <typename T>
Code CodeOf(const Result<T>& r) {
  return r.status().code();
}

// Runs `op` until it is not a lock timeout: a timed-out request is re-submitted, up to 10 times
// (10 x lock_timeout: far beyond a takeover; more means the role never moved).
template <typename Op>
auto Retry(Op op) {
  for (int attempt = 0;; ++attempt) {
    auto r = op();
    if (r.ok() || CodeOf(r) != Code::kTimeout || attempt == 10) return r;
    g_shared->timeouts.fetch_add(1);
  }
}

// A worker "host": puts and reads back its own blocks (and an older one), verifying every byte.
[[noreturn]] void Worker(const std::string& path, const OpenOptions& o, uint64_t id) {
  internal::SetFaultHook(&Hook);
  Result<std::unique_ptr<Pool>> p = Retry([&] { return Pool::Open(path, o); });
  if (!p.ok()) {
    RecordError(p.status());
    _exit(3);
  }
  Pool& pool = **p;
  std::vector<std::byte> data(4096), out(4096);
  for (uint64_t i = 0; i < kOpsPerWorker; ++i) {
    const uint64_t key = id * 1000000 + i;
    FillPayload(key, data);
    Status put = Retry([&] { return pool.Put(MakeHash(key), data, Checksum(data)); });
    if (!put.ok()) RecordError(put);
    for (uint64_t k : {key, id * 1000000 + i / 2}) {
      uint64_t tag = 0;
      Result<uint64_t> n = Retry([&] { return pool.Get(MakeHash(k), out, &tag); });
      if (!n.ok()) {
        // Evicted to make room is fine (small region); anything else is a failure.
        if (n.status().code() != Code::kNotFound) RecordError(n.status());
        continue;
      }
      std::vector<std::byte> want(*n);
      FillPayload(k, want);
      if (Checksum({out.data(), *n}) != tag || std::memcmp(out.data(), want.data(), *n) != 0) {
        g_shared->mismatches.fetch_add(1);
      }
    }
    g_shared->ops.fetch_add(1);
  }
  const PoolStats s = pool.Stats();
  g_shared->final_epoch.store(s.manager_epoch);
  g_shared->final_node.store(s.manager_node);
  g_shared->final_pid.store(s.manager_pid);
  _exit(0);
}

int WaitExit(pid_t pid, int options = 0) {
  int status = 0;
  if (waitpid(pid, &status, options) != pid) return -1;
  return status;
}

// True while none of `pids` has exited (they are not reaped here).
bool AllRunning(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    siginfo_t info{};
    if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != 0) {
      return false;
    }
  }
  return true;
}

// Forks the process that takes the manager role (node 0, the preferred manager node) and returns
// once it holds the role (it says so through a pipe); it then serves until its doom point.
pid_t StartManager(const std::string& path, const OpenOptions& base) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    internal::SetFaultHook(&Hook);
    OpenOptions o = base;
    o.node = 0;
    Result<std::unique_ptr<Pool>> p = Pool::Open(path, o);
    if (!p.ok() || (*p)->Stats().manager_node != 0) _exit(3);
    const char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(4);
    for (;;) pause();  // serve (the manager thread) until killed
  }
  close(ready[1]);
  char c = 0;
  const bool ok = read(ready[0], &c, 1) == 1;
  close(ready[0]);
  return ok ? pid : -1;
}

// (kill signal, doom point) of the manager
using FailParam = std::tuple<int, const char*>;
class ManagerFailoverTest : public ::testing::TestWithParam<FailParam> {};

// Workers on nodes 1 and 2 keep working while the process holding the manager role on node 0 is
// killed (or stopped: alive but silent past its lease, then resumed) in the middle of a grant.
// Every operation completes (a timed-out wait is re-submitted), 0 mismatches, never two holders,
// and the role ends up on another node.
TEST_P(ManagerFailoverTest, WorkersFinishAfterManagerDiesMidGrant) {
  const auto [signal, point] = GetParam();
  g_shared = MapShared();
  ASSERT_NE(g_shared, nullptr);
  TempDir dir;
  const std::string path = dir.File("region");
  ASSERT_TRUE(Pool::Create(path, SmallGeometry(MemoryModel::kNonCoherent)).ok());
  OpenOptions o;
  o.local_dir = dir.path();
  o.lock_timeout = kNanosPerSecond;  // > 200 ms lease + 20 ms poll: a takeover fits in it
  g_doom_point = point;
  g_doom_signal = signal;
  g_doom_at = 300;  // of the ~2,400 grants the run needs
  const pid_t manager = StartManager(path, o);
  ASSERT_GT(manager, 0);
  std::vector<pid_t> workers;
  for (int w = 0; w < kWorkers; ++w) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      OpenOptions wo = o;
      wo.node = static_cast<uint32_t>(1 + w);
      Worker(path, wo, 1 + w);
    }
    workers.push_back(pid);
  }
  if (signal == SIGSTOP) {
    // The manager is stalled at its grant. Resume it only once the workers got grants from its
    // successor (their progress says so), so that its pending grant lands under a lost epoch.
    const int st = WaitExit(manager, WUNTRACED);
    ASSERT_TRUE(WIFSTOPPED(st)) << "the manager did not stop at " << point;
    const uint64_t at_stop = g_shared->ops.load();
    while (g_shared->ops.load() < std::min<uint64_t>(at_stop + 50, kWorkers * kOpsPerWorker) &&
           AllRunning(workers)) {
      std::this_thread::yield();  // bounded by the workers' own progress or exit
    }
    kill(manager, SIGCONT);
  }
  for (pid_t pid : workers) {
    const int st = WaitExit(pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "worker exit " << st;
  }
  if (signal == SIGSTOP) {
    kill(manager, SIGKILL);
  }
  const int st = WaitExit(manager);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "manager status " << st;
  EXPECT_GE(g_shared->grants.load(), g_doom_at) << "the manager was never doomed";
  EXPECT_EQ(g_shared->ops.load(), kWorkers * kOpsPerWorker);
  EXPECT_EQ(g_shared->mismatches.load(), 0u);
  EXPECT_EQ(g_shared->violations.load(), 0u) << "two holders of the metadata lock at once";
  EXPECT_EQ(g_shared->other_errors.load(), 0u) << g_shared->last_error;
  // The role moved: a later epoch (the doomed manager claimed epoch 1). Killed, it cannot hold
  // the role at the end; a stalled one that resumed may legitimately have claimed it back later
  // (after the last worker holding it exited without resigning).
  EXPECT_GE(g_shared->final_epoch.load(), 2u);
  if (signal == SIGKILL) {
    EXPECT_NE(g_shared->final_node.load(), 0u);
    EXPECT_NE(g_shared->final_pid.load(), manager);
  }
  RecordProperty("lock_timeouts_resubmitted", std::to_string(g_shared->timeouts.load()));
  munmap(g_shared, sizeof(Shared));
  g_shared = nullptr;
  g_doom_point = nullptr;
}

INSTANTIATE_TEST_SUITE_P(
    NonCoherent, ManagerFailoverTest,
    ::testing::Values(FailParam{SIGKILL, "manager.grant"}, FailParam{SIGKILL, "manager.granted"},
                      FailParam{SIGSTOP, "manager.grant"}),
    [](const ::testing::TestParamInfo<FailParam>& info) {
      std::string n = std::string(std::get<0>(info.param) == SIGKILL ? "Kill_" : "Stall_") +
                      std::get<1>(info.param);
      for (char& c : n) {
        if (c == '.') c = '_';
      }
      return n;
    });

// The coherent model has no manager role (a robust mutex; the kernel hands it on when its holder
// dies): the process in the lock role there is the holder. Killed inside the critical section,
// the workers on the other "nodes" still finish, 0 mismatches, never two holders.
TEST(CoherentHolderTest, WorkersFinishAfterHolderDiesInsideTheLock) {
  g_shared = MapShared();
  ASSERT_NE(g_shared, nullptr);
  TempDir dir;
  const std::string path = dir.File("region");
  ASSERT_TRUE(Pool::Create(path, SmallGeometry(MemoryModel::kCoherent)).ok());
  OpenOptions o;
  o.lock_timeout = kNanosPerSecond;
  g_doom_point = "lock.acquired";
  g_doom_signal = SIGKILL;
  g_doom_at = 300;  // worker 0's 300th acquisition (3 per operation): mid-run
  std::vector<pid_t> pids;
  for (int w = 0; w < kWorkers + 1; ++w) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (w > 0) g_doom_point = nullptr;  // only worker 0 can die
      Worker(path, o, 1 + w);
    }
    pids.push_back(pid);
  }
  const int victim = WaitExit(pids[0]);
  const bool died = WIFSIGNALED(victim) && WTERMSIG(victim) == SIGKILL;
  for (size_t i = 1; i < pids.size(); ++i) {
    const int st = WaitExit(pids[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "worker exit " << st;
  }
  EXPECT_TRUE(died) << "the victim finished without reaching its kill point";
  EXPECT_GE(g_shared->ops.load(), kWorkers * kOpsPerWorker);
  EXPECT_EQ(g_shared->mismatches.load(), 0u);
  EXPECT_EQ(g_shared->violations.load(), 0u) << "two holders of the metadata lock at once";
  EXPECT_EQ(g_shared->other_errors.load(), 0u) << g_shared->last_error;
  munmap(g_shared, sizeof(Shared));
  g_shared = nullptr;
  g_doom_point = nullptr;
}

// No process may take the manager role (lock_manager = false everywhere): Open fails within the
// bound with kTimeout naming the lock, the wait and why nothing grants, instead of spinning.
TEST(LockBoundTest, NoManagerIsABoundedError) {
  TempDir dir;
  const std::string path = dir.File("region");
  ASSERT_TRUE(Pool::Create(path, SmallGeometry(MemoryModel::kNonCoherent)).ok());
  OpenOptions o;
  o.local_dir = dir.path();
  o.node = 1;
  o.lock_manager = false;
  o.lock_timeout = 300 * kNanosPerMilli;
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Pool>> p = Pool::Open(path, o);
  const auto waited = std::chrono::steady_clock::now() - t0;
  RecordProperty(
      "waited_ms",
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kTimeout);
  const std::string msg = p.status().ToString();
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("metadata lock not granted to node 1 within 300 ms"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("no process has taken the lock-manager role"), std::string::npos) << msg;
  // The request was withdrawn: a process that may manage attaches at once afterwards.
  OpenOptions m = o;
  m.node = 0;
  m.lock_manager = true;
  Result<std::unique_ptr<Pool>> ok = Pool::Open(path, m);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
}

// Coherent model: a holder alive but stuck inside the lock (stopped) makes the others' waits end
// in kTimeout naming the mutex; once it resumes, they get the lock.
TEST(LockBoundTest, StuckCoherentHolderIsABoundedError) {
  g_shared = MapShared();
  ASSERT_NE(g_shared, nullptr);
  TempDir dir;
  const std::string path = dir.File("region");
  ASSERT_TRUE(Pool::Create(path, SmallGeometry(MemoryModel::kCoherent)).ok());
  const pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    g_doom_point = "lock.acquired";
    g_doom_signal = SIGSTOP;
    g_doom_at = 2;  // Open is the first acquisition; the Put below the second
    internal::SetFaultHook(&Hook);
    auto p = Pool::Open(path);
    if (!p.ok()) _exit(3);
    std::vector<std::byte> d(100);
    _exit((*p)->Put(MakeHash(1), d).ok() ? 0 : 4);
  }
  ASSERT_TRUE(WIFSTOPPED(WaitExit(holder, WUNTRACED)));
  OpenOptions o;
  o.lock_timeout = 200 * kNanosPerMilli;
  Result<std::unique_ptr<Pool>> p = Pool::Open(path, o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kTimeout);
  EXPECT_NE(
      p.status().ToString().find("metadata lock (coherent mutex): not acquired within 200 ms"),
      std::string::npos)
      << p.status().ToString();
  kill(holder, SIGCONT);
  const int st = WaitExit(holder);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  p = Pool::Open(path, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE((*p)->Contains(MakeHash(1)));
  munmap(g_shared, sizeof(Shared));
  g_shared = nullptr;
}

// Fencing, deterministically: the test plays a manager that lost the role. A grant carrying an
// epoch that is no longer the claim's is refused (the waiter asks again under a new number and
// does not enter); a grant under the current epoch is taken.
TEST(LockFencingTest, GrantFromAFormerManagerIsRefused) {
  TempDir dir;
  const std::string path = dir.File("region");
  const Geometry g = SmallGeometry(MemoryModel::kNonCoherent);
  ASSERT_TRUE(Pool::Create(path, g).ok());
  // Map the region to play the manager on its lock lines.
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* base = mmap(nullptr, g.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(base, MAP_FAILED);
  auto* h = static_cast<internal::RegionHeader*>(base);
  uint8_t* locks = static_cast<uint8_t*>(base) + h->locks_off + internal::kMutexAreaBytes;
  auto* claim = reinterpret_cast<internal::ManagerClaim*>(locks + sizeof(internal::LockControl));
  auto* req = reinterpret_cast<internal::RequestSlot*>(locks + sizeof(internal::LockControl) +
                                                       sizeof(internal::ManagerClaim) +
                                                       sizeof(internal::ManagerBeat));
  auto* grant = reinterpret_cast<internal::GrantSlot*>(req + g.num_nodes);
  const uint32_t node = 1;
  const uint64_t current = (uint64_t{2} << internal::kEpochNodeBits) | 2;  // epoch 2, node 2
  const uint64_t former = (uint64_t{1} << internal::kEpochNodeBits) | 0;   // epoch 1, node 0
  std::atomic_ref<uint64_t>(claim->epoch).store(current);
  std::atomic_ref<int32_t>(claim->pid).store(static_cast<int32_t>(getpid()));

  std::atomic<bool> done{false};
  Status result;
  std::thread waiter([&] {
    OpenOptions o;
    o.local_dir = dir.path();
    o.node = node;
    o.lock_manager = false;  // only the test grants
    o.lock_timeout = 20 * kNanosPerSecond;
    auto p = Pool::Open(path, o);
    result = p.status();
    done.store(true);
    // Detaching takes the lock again: the test grants that one too (below).
  });
  auto request = [&] { return std::atomic_ref<uint64_t>(req[node].request).load(); };
  auto wait_for = [&](auto pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!pred() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return pred();
  };
  ASSERT_TRUE(wait_for([&] { return (request() & internal::kRequestActive) != 0; }));
  const uint64_t seq = request() >> 1;
  std::atomic_ref<uint64_t>(grant[node].grant).store((former << internal::kGrantSeqBits) | seq);
  // Refused: the waiter re-requests under seq + 1 and stays outside.
  ASSERT_TRUE(wait_for([&] { return (request() >> 1) == seq + 1; }));
  EXPECT_TRUE((request() & internal::kRequestActive) != 0);
  EXPECT_FALSE(done.load());
  // The current manager's grant of the new request is taken.
  std::atomic_ref<uint64_t>(grant[node].grant)
      .store((current << internal::kGrantSeqBits) | (seq + 1));
  ASSERT_TRUE(wait_for([&] { return done.load(); }));
  EXPECT_TRUE(result.ok()) << result.ToString();
  // Grant the detach (the Pool is destroyed at the end of the thread).
  ASSERT_TRUE(wait_for([&] {
    const uint64_t r = request();
    return (r & internal::kRequestActive) != 0 && (r >> 1) > seq + 1;
  }));
  std::atomic_ref<uint64_t>(grant[node].grant)
      .store((current << internal::kGrantSeqBits) | (request() >> 1));
  waiter.join();
  munmap(base, g.region_bytes);
}

}  // namespace
}  // namespace dualpath::pool
