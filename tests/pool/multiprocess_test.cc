// Multi-process system tests of the pool (acceptance 1 and 2 of issue 7), in both memory models:
//  - Stress: 4 worker processes, >= 1,000,000 random operations in total (DUALPATH_POOL_STRESS_OPS
//    overrides), every read verified against the checksum stored with the block.
//  - KillNine: 100 rounds (DUALPATH_POOL_CRASH_ROUNDS overrides) of SIGKILL on a random worker at
//    a point chosen by the parent's reads of the workers' progress pipes (no sleeps); after each
//    round the dead process holds nothing (its slot, pins and reservations are reclaimed by the
//    next Tick, which the background thread runs every lease/4), survivors keep verifying every
//    read, and the parent reads correct data.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "dualpath/pool/pool.h"
#include "pool/layout.h"
#include "pool/test_util.h"

extern char** environ;

namespace dualpath::pool {
namespace {

using testing::Checksum;
using testing::MakeHash;
using testing::TempDir;

constexpr int kWorkers = 4;

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

// This build's bin/pool_stress_worker, through $DUALPATH_BINARY_DIR (CTest sets it; not a compile
// definition, whose absolute path would make this file a ccache miss in every fresh clone).
std::string WorkerBinary() {
  const char* dir = std::getenv("DUALPATH_BINARY_DIR");
  return std::string(dir != nullptr ? dir : "build/dev") + "/bin/pool_stress_worker";
}

struct Child {
  pid_t pid = -1;
  int stdin_w = -1;   // control: closing it asks a forever-worker to finish
  int stdout_r = -1;  // its final report
  int progress_r = -1;
};

Child Spawn(const std::string& region, const std::string& local_dir, uint32_t node, uint64_t seed,
            uint64_t ops) {
  int in[2], out[2], prog[2];
  EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(prog, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, prog[1], 3);
  const std::string worker = WorkerBinary();
  std::vector<std::string> args = {
      worker, region, local_dir, std::to_string(node), std::to_string(seed), std::to_string(ops),
      "3"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child c;
  EXPECT_EQ(posix_spawn(&c.pid, worker.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  close(prog[1]);
  c.stdin_w = in[1];
  c.stdout_r = out[0];
  c.progress_r = prog[0];
  return c;
}

std::string ReadAllFd(int fd) {
  std::string s;
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

uint64_t Field(const std::string& report, const std::string& name) {
  const size_t p = report.find(name + "=");
  return p == std::string::npos ? ~uint64_t{0}
                                : std::strtoull(report.c_str() + p + name.size() + 1, nullptr, 10);
}

void CloseChild(Child& c) {
  for (int fd : {c.stdin_w, c.stdout_r, c.progress_r}) {
    if (fd >= 0) close(fd);
  }
  c = Child{};
}

class MultiProcessTest : public ::testing::TestWithParam<MemoryModel> {
 protected:
  void SetUp() override {
    path_ = dir_.File("region");
    Geometry g;
    g.chunk_bytes = 64 << 10;
    g.index_capacity = 2048;
    g.max_procs = 16;
    g.pin_records = 64;
    g.num_nodes = 2;
    g.model = GetParam();
    // 16 chunks (1 MiB) for ~1.1 MiB of distinct payload: eviction runs all the time.
    g.region_bytes = internal::LayoutFor(g, 16, g.index_capacity).data_off + 16 * g.chunk_bytes;
    ASSERT_TRUE(Pool::Create(path_, g).ok());
    OpenOptions o;
    o.local_dir = dir_.path();
    o.background_thread = false;    // the test calls Tick itself, deterministically
    auto p = Pool::Open(path_, o);  // node 0: this process hosts the lock manager
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(*p);
  }

  // Reads every key the workers use; every present block must verify.
  void VerifyAll() {
    std::vector<std::byte> buf(8192);
    for (uint64_t k = 0; k < 512; ++k) {
      uint64_t tag = 0;
      Result<uint64_t> n = pool_->Get(MakeHash(k), buf, &tag);
      if (!n.ok()) {
        ASSERT_EQ(n.status().code(), Code::kNotFound);
        continue;
      }
      std::vector<std::byte> want(*n);
      testing::FillPayload(k, want);
      ASSERT_EQ(Checksum({buf.data(), *n}), tag) << "key " << k;
      ASSERT_EQ(std::memcmp(buf.data(), want.data(), *n), 0) << "key " << k;
    }
  }

  // Pins and reservations are all accounted to live processes, in one consistent snapshot.
  void ExpectNoOrphans(pid_t dead) {
    PoolStats s = pool_->Stats();
    uint64_t pins = 0, writing = 0;
    for (const ProcInfo& p : s.procs) {
      EXPECT_NE(p.pid, dead) << "dead process still attached";
      pins += p.pins;
      writing += p.writing;
    }
    EXPECT_EQ(s.total_pins, pins);
    EXPECT_EQ(s.writing_entries, writing);
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Pool> pool_;
};

TEST_P(MultiProcessTest, StressOneMillionOpsZeroMismatches) {
  const uint64_t total = EnvOr("DUALPATH_POOL_STRESS_OPS", 1'000'000);
  std::vector<Child> kids;
  for (int w = 0; w < kWorkers; ++w) {
    kids.push_back(Spawn(path_, dir_.path(), w % 2, 1000 + w, (total + kWorkers - 1) / kWorkers));
  }
  uint64_t ops = 0, verified = 0, mismatches = 0;
  for (Child& c : kids) {
    const std::string report = ReadAllFd(c.stdout_r);
    int status = 0;
    ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "worker failed, status " << status << ": " << report;
    ops += Field(report, "ops");
    verified += Field(report, "verified");
    mismatches += Field(report, "mismatches");
    CloseChild(c);
  }
  std::printf("pool stress (%s): %lu ops, %lu verified reads, %lu mismatches\n",
              std::string(MemoryModelName(GetParam())).c_str(), static_cast<unsigned long>(ops),
              static_cast<unsigned long>(verified), static_cast<unsigned long>(mismatches));
  EXPECT_GE(ops, total);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(verified, total / 10);
  VerifyAll();
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.total_pins, 0u);
  EXPECT_EQ(s.writing_entries, 0u);
  EXPECT_EQ(s.live_procs, 1u);
  EXPECT_GT(s.evictions, 0u);
  ASSERT_TRUE(pool_->Recover().ok());
  EXPECT_EQ(pool_->Stats().free_chunks, s.free_chunks);  // incremental state == rebuilt state
}

TEST_P(MultiProcessTest, KillNineRandomWorkerEveryRound) {
  const uint64_t rounds = EnvOr("DUALPATH_POOL_CRASH_ROUNDS", 100);
  std::mt19937_64 rng(42);
  std::vector<Child> kids;
  uint64_t seed = 5000;
  for (int w = 0; w < kWorkers; ++w) kids.push_back(Spawn(path_, dir_.path(), w % 2, ++seed, 0));
  const uint64_t reclaimed_before = pool_->Stats().reclaimed_procs;
  for (uint64_t r = 0; r < rounds; ++r) {
    const int v = static_cast<int>(rng() % kWorkers);
    // Let the victim make a random amount of progress, then kill it wherever it is.
    const int target = 1 + static_cast<int>(rng() % 8);
    char buf[8];
    for (int got = 0; got < target;) {
      const ssize_t n = read(kids[v].progress_r, buf, static_cast<size_t>(target - got));
      ASSERT_GT(n, 0) << "worker " << v << " stopped reporting progress (round " << r << ")";
      got += static_cast<int>(n);
    }
    const pid_t dead = kids[v].pid;
    ASSERT_EQ(kill(dead, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(dead, &status, 0), dead);
    ASSERT_TRUE(WIFSIGNALED(status))
        << "worker exited by itself (status " << status << "): " << ReadAllFd(kids[v].stdout_r);
    CloseChild(kids[v]);
    // The survivors are still running (a mismatch would have made one exit).
    for (const Child& c : kids) {
      if (c.pid > 0) {
        ASSERT_EQ(waitpid(c.pid, &status, WNOHANG), 0) << "a survivor exited";
      }
    }
    ASSERT_TRUE(pool_->Tick().ok());
    ExpectNoOrphans(dead);
    for (int i = 0; i < 4; ++i) {
      std::vector<std::byte> out(8192);
      uint64_t tag = 0;
      const uint64_t k = rng() % 512;
      Result<uint64_t> n = pool_->Get(MakeHash(k), out, &tag);
      if (n.ok()) {
        ASSERT_EQ(Checksum({out.data(), *n}), tag) << "round " << r << " key " << k;
      }
    }
    kids[v] = Spawn(path_, dir_.path(), static_cast<uint32_t>(v % 2), ++seed, 0);
  }
  EXPECT_GE(pool_->Stats().reclaimed_procs - reclaimed_before, rounds);
  // Stop the survivors cleanly: each verified every read it made.
  for (Child& c : kids) {
    close(c.stdin_w);
    c.stdin_w = -1;
    const std::string report = ReadAllFd(c.stdout_r);
    int status = 0;
    ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << report;
    EXPECT_EQ(Field(report, "mismatches"), 0u) << report;
    CloseChild(c);
  }
  VerifyAll();
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.total_pins, 0u);
  EXPECT_EQ(s.writing_entries, 0u);
  EXPECT_EQ(s.live_procs, 1u);
}

INSTANTIATE_TEST_SUITE_P(Models, MultiProcessTest,
                         ::testing::Values(MemoryModel::kCoherent, MemoryModel::kNonCoherent),
                         [](const auto& info) { return std::string(MemoryModelName(info.param)); });

}  // namespace
}  // namespace dualpath::pool
