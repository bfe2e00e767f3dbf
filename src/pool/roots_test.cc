// Owner-bound roots (RootLifetime::kProcess): a root of a process that was SIGKILLed is dropped
// by the next recovery sweep and its chunks are allocatable again; persistent roots of the same
// process survive; a live owner's root is never taken; its name can be reused after the owner's
// death; a closed attachment's roots go with it. Plus OpenOrCreate under a creation race.
//
// Children are synchronized through pipes (a child reports "ready" and then blocks reading a pipe
// the parent never writes): no sleeps.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "dualpath/pool/pool.h"
#include "pool/layout.h"
#include "pool/test_util.h"

namespace dualpath::pool {
namespace {

using testing::TempDir;

constexpr uint64_t kChunk = 64 << 10;
constexpr uint64_t kChunks = 16;

Geometry SmallGeometry(MemoryModel model) {
  Geometry g;
  g.chunk_bytes = kChunk;
  g.index_capacity = 256;
  g.max_procs = 16;
  g.pin_records = 16;
  g.num_nodes = 2;
  g.model = model;
  g.region_bytes = internal::LayoutFor(g, kChunks, g.index_capacity).data_off + kChunks * kChunk;
  return g;
}

const RootInfo* FindRoot(const PoolStats& s, const std::string& name) {
  auto it = std::find_if(s.root_list.begin(), s.root_list.end(),
                         [&](const RootInfo& r) { return r.name == name; });
  return it == s.root_list.end() ? nullptr : &*it;
}

// A forked process attached to the region, holding what `script` made until it is killed.
class Holder {
 public:
  // `script` runs in the child on its own Pool; its return value is the child's report byte
  // ('k' = ok). The child then blocks until killed.
  template <typename F>
  Holder(const std::string& path, const OpenOptions& o, F script) {
    int up[2], hold[2];
    EXPECT_EQ(pipe(up), 0);
    EXPECT_EQ(pipe(hold), 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(up[0]);
      close(hold[1]);
      char report = 'o';  // open failed
      auto p = Pool::Open(path, o);
      if (p.ok()) report = script(**p);
      if (write(up[1], &report, 1) != 1) _exit(2);
      char c;
      while (read(hold[0], &c, 1) != 0) {
      }
      _exit(0);
    }
    close(up[1]);
    close(hold[0]);
    hold_ = hold[1];
    char c = 0;
    EXPECT_EQ(read(up[0], &c, 1), 1);
    close(up[0]);
    report_ = c;
  }
  ~Holder() {
    if (pid_ > 0 && !reaped_) Kill();
    close(hold_);
  }
  char report() const { return report_; }
  pid_t pid() const { return pid_; }
  // SIGKILL and reap; true if it died of the signal.
  bool Kill() {
    kill(pid_, SIGKILL);
    int st = 0;
    reaped_ = waitpid(pid_, &st, 0) == pid_;
    return reaped_ && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  char report_ = 0;
  bool reaped_ = false;
};

class RootsTest : public ::testing::TestWithParam<MemoryModel> {
 protected:
  void SetUp() override {
    path_ = dir_.File("region");
    ASSERT_TRUE(Pool::Create(path_, SmallGeometry(GetParam())).ok());
    auto p = Pool::Open(path_, Options());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(p).value();
  }
  OpenOptions Options() {
    OpenOptions o;
    o.background_thread = false;
    o.local_dir = dir_.path();
    return o;
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Pool> pool_;  // the surviving process (node 0: the lock manager's node)
};

TEST_P(RootsTest, KilledOwnersRootIsReclaimedAndPersistentRootSurvives) {
  Holder child(path_, Options(), [](Pool& p) -> char {
    auto owned = p.CreateRoot("engine/d1", 5 * kChunk, RootLifetime::kProcess);
    if (!owned.ok()) return '1';
    std::memset(owned->data(), 0xab, owned->size());
    auto kept = p.CreateRoot("prefix-index", 1000, RootLifetime::kPersistent);
    if (!kept.ok()) return '2';
    std::memset(kept->data(), 0x5a, kept->size());
    return 'k';
  });
  ASSERT_EQ(child.report(), 'k');

  // A live owner's root is never reclaimed, not even by an explicit sweep.
  ASSERT_TRUE(pool_->Recover().ok());
  ASSERT_TRUE(pool_->Tick().ok());
  PoolStats s = pool_->Stats();
  ASSERT_EQ(s.roots, 2u);
  const RootInfo* owned = FindRoot(s, "engine/d1");
  ASSERT_NE(owned, nullptr);
  EXPECT_EQ(owned->lifetime, RootLifetime::kProcess);
  EXPECT_EQ(owned->owner_pid, child.pid());
  EXPECT_EQ(owned->bytes, 5 * kChunk);
  ASSERT_NE(FindRoot(s, "prefix-index"), nullptr);
  EXPECT_EQ(FindRoot(s, "prefix-index")->lifetime, RootLifetime::kPersistent);
  EXPECT_EQ(s.used_bytes, 6 * kChunk);
  EXPECT_EQ(s.free_chunks, kChunks - 6);
  EXPECT_EQ(pool_->CreateRoot("engine/d1", kChunk, RootLifetime::kProcess).status().code(),
            Code::kAlreadyExists);

  ASSERT_TRUE(child.Kill());
  ASSERT_TRUE(pool_->Tick().ok());  // sees the dead process and sweeps
  s = pool_->Stats();
  EXPECT_EQ(s.roots, 1u);
  EXPECT_EQ(FindRoot(s, "engine/d1"), nullptr);
  EXPECT_EQ(s.reclaimed_roots, 1u);
  EXPECT_EQ(s.reclaimed_procs, 1u);
  EXPECT_EQ(s.used_bytes, kChunk);
  EXPECT_EQ(s.free_chunks, kChunks - 1);
  EXPECT_EQ(pool_->GetRoot("engine/d1").status().code(), Code::kNotFound);
  // The persistent root is intact.
  Result<std::span<std::byte>> kept = pool_->GetRoot("prefix-index");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(static_cast<uint8_t>((*kept)[0]), 0x5a);
  EXPECT_EQ(static_cast<uint8_t>((*kept)[999]), 0x5a);
  // Every reclaimed byte is allocatable again: the dead root's 5-chunk run (zeroed for its new
  // owner) and the 10 chunks behind the persistent root leave nothing free.
  Result<std::span<std::byte>> reused = pool_->CreateRoot("reused", 5 * kChunk);
  ASSERT_TRUE(reused.ok()) << reused.status().ToString();
  EXPECT_TRUE(
      std::all_of(reused->begin(), reused->end(), [](std::byte b) { return b == std::byte{0}; }));
  ASSERT_TRUE(pool_->CreateRoot("rest", (kChunks - 6) * kChunk).ok());
  EXPECT_EQ(pool_->Stats().free_chunks, 0u);
}

TEST_P(RootsTest, NameOfADeadOwnerIsReusableBeforeAnySweep) {
  Holder child(path_, Options(), [](Pool& p) -> char {
    return p.CreateRoot("engine/d1", 3 * kChunk, RootLifetime::kProcess).ok() ? 'k' : '1';
  });
  ASSERT_EQ(child.report(), 'k');
  ASSERT_TRUE(child.Kill());
  // No Tick: CreateRoot itself notices that the holder of the name is gone.
  Result<std::span<std::byte>> again =
      pool_->CreateRoot("engine/d1", 10 * kChunk, RootLifetime::kProcess);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  PoolStats s = pool_->Stats();
  ASSERT_EQ(s.roots, 1u);
  EXPECT_EQ(s.root_list[0].owner_pid, getpid());
  EXPECT_EQ(s.root_list[0].bytes, 10 * kChunk);
  EXPECT_EQ(s.used_bytes, 10 * kChunk);
  EXPECT_EQ(s.reclaimed_roots, 1u);
}

TEST_P(RootsTest, ClosedAttachmentTakesItsRootsAlong) {
  auto other = Pool::Open(path_, Options());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->CreateRoot("mine", 2 * kChunk, RootLifetime::kProcess).ok());
  ASSERT_TRUE((*other)->CreateRoot("ours", kChunk).ok());
  EXPECT_EQ(pool_->Stats().roots, 2u);
  // DestroyRoot works on owner-bound roots too; then re-create and close.
  ASSERT_TRUE((*other)->DestroyRoot("mine").ok());
  EXPECT_EQ(pool_->Stats().roots, 1u);
  ASSERT_TRUE((*other)->CreateRoot("mine", 2 * kChunk, RootLifetime::kProcess).ok());
  other->reset();
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.roots, 1u);
  EXPECT_NE(FindRoot(s, "ours"), nullptr);
  EXPECT_EQ(s.free_chunks, kChunks - 1);
}

TEST_P(RootsTest, BadLifetimeIsRejected) {
  EXPECT_EQ(pool_->CreateRoot("x", 10, static_cast<RootLifetime>(7)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(pool_->Stats().roots, 0u);
}

INSTANTIATE_TEST_SUITE_P(Models, RootsTest,
                         ::testing::Values(MemoryModel::kCoherent, MemoryModel::kNonCoherent),
                         [](const auto& info) { return std::string(MemoryModelName(info.param)); });

// Several processes race to OpenOrCreate the same region: exactly one region results, all attach
// to it (each one's root is visible to the others), and an existing region is never clobbered.
TEST(OpenOrCreateTest, RacingCreatorsShareOneRegion) {
  TempDir dir;
  const std::string path = dir.File("node.pool");
  const Geometry g = SmallGeometry(MemoryModel::kCoherent);
  OpenOptions o;
  o.background_thread = false;
  constexpr int kProcs = 6;
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    // Each racer forks, waits on the gate (closed by the parent: all start together), then
    // OpenOrCreates and takes a root named after itself.
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(gate[1]);
      char c;
      while (read(gate[0], &c, 1) > 0) {
      }
      auto p = Pool::OpenOrCreate(path, g, o);
      if (!p.ok()) _exit(10);
      if (!(*p)->CreateRoot("racer/" + std::to_string(i), 1000).ok()) _exit(11);
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(gate[0]);
  close(gate[1]);  // go
  for (pid_t pid : pids) {
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "racer exit " << WEXITSTATUS(st);
  }
  auto p = Pool::OpenOrCreate(path, g, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  PoolStats s = (*p)->Stats();
  EXPECT_EQ(s.roots, static_cast<uint64_t>(kProcs));  // nobody's region was replaced
  // Create never replaces an existing region.
  EXPECT_EQ(Pool::Create(path, g).code(), Code::kAlreadyExists);
  EXPECT_EQ((*p)->Stats().roots, static_cast<uint64_t>(kProcs));
  // Nothing else was left in the directory (the region was formatted unnamed, then linked).
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
}

}  // namespace
}  // namespace dualpath::pool
