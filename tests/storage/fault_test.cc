// System-level fault tests of the storage tier (issue 5, acceptance 3): disk full, permission
// denied, and a writer killed with SIGKILL mid-write. Each must give a clear error or a counted
// miss, never leave a partial file under a block's name, and leave the store serving.
//
// These tests need root (mount, setuid); they skip with a message otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "dualpath/storage/block_store.h"
#include "dualpath/storage/layout.h"
#include "storage/test_util.h"

namespace dualpath::storage {
namespace {

namespace fs = std::filesystem;
using testing::HashOf;
using testing::PayloadOf;
using testing::ScratchDir;
using testing::SmallShape;

constexpr uint64_t kFp = 0x5151;

StoreOptions Opts(const std::string& root) {
  StoreOptions o;
  o.root = root;
  o.model_fingerprint = kFp;
  o.queue_depth = 4;
  return o;
}

Status Put(BlockStore& s, uint64_t i, const kv::BlockShape& shape = SmallShape()) {
  auto p = PayloadOf(i, shape.FullBytes());
  return s.Write(HashOf(i), shape, p);
}

// Reads block i; OK only if the payload is exactly block i's.
Status Get(BlockStore& s, uint64_t i, const kv::BlockShape& shape = SmallShape()) {
  AlignedBuffer buf(BlockStore::FileBytes(shape));
  ReadRequest req{HashOf(i), buf.span(), shape.tokens};
  ReadResult r = std::move(s.ReadBatch({&req, 1})[0]);
  if (r.status.ok()) {
    auto want = PayloadOf(i, shape.FullBytes());
    if (r.block.payload.size() != want.size() ||
        std::memcmp(r.block.payload.data(), want.data(), want.size()) != 0) {
      return Internal("read returned wrong bytes for block " + std::to_string(i));
    }
  }
  return r.status;
}

size_t CountTmp(const std::string& dir) {
  size_t n = 0;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    n += ParseTmpFileName(e.path().filename().string()).has_value();
  }
  return n;
}

// Every file under a block name must verify: nothing partial is ever visible.
void ExpectAllBlockFilesWhole(BlockStore& s, const kv::BlockShape& shape, uint64_t max_id) {
  for (uint64_t i = 0; i < max_id; ++i) {
    if (s.Contains(HashOf(i))) {
      EXPECT_TRUE(Get(s, i, shape).ok()) << "block " << i;
    }
  }
  EXPECT_EQ(s.stats().corrupt, 0u);
}

TEST(StorageFaultTest, DiskFullIsAClearErrorAndLeavesNothingPartial) {
  ScratchDir scratch;
  std::string mnt = scratch.path() + "/small";
  fs::create_directories(mnt);
  if (::mount("dp_storage_full", mnt.c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount tmpfs (" << std::strerror(errno) << "); needs root";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};

  // (tmpfs accepts O_DIRECT since Linux 6.6; older kernels take the buffered fallback.)
  auto s = BlockStore::Open(Opts(mnt));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const kv::BlockShape shape{4, 64, 4096};  // 1 MiB payload
  Status st;
  uint64_t written = 0;
  for (uint64_t i = 0; i < 16 && st.ok(); ++i) {
    st = Put(**s, i, shape);
    written += st.ok();
  }
  EXPECT_EQ(st.code(), Code::kStorageNoSpace) << st.ToString();
  EXPECT_NE(st.message().find(".tmp."), std::string::npos) << "names the file: " << st.message();
  EXPECT_GE(written, 5u);
  EXPECT_LT(written, 8u);
  EXPECT_EQ(CountTmp((*s)->model_dir()), 0u);
  EXPECT_FALSE((*s)->Contains(HashOf(written)));
  ExpectAllBlockFilesWhole(**s, shape, 16);
  // Keeps serving: after space is freed, the failed block can be written.
  ASSERT_TRUE((*s)->Remove(HashOf(0)).ok());
  ASSERT_TRUE((*s)->Remove(HashOf(1)).ok());
  EXPECT_TRUE(Put(**s, written, shape).ok());
  EXPECT_TRUE(Get(**s, written, shape).ok());
}

// ramfs has no direct I/O at all: kAuto falls back to buffered I/O (with one log line) and still
// stores and verifies blocks; kDirect refuses to open with a clear error.
TEST(StorageFaultTest, ODirectRefusedFallsBackToBufferedIo) {
  ScratchDir scratch;
  std::string mnt = scratch.path() + "/ram";
  fs::create_directories(mnt);
  if (::mount("dp_storage_ram", mnt.c_str(), "ramfs", 0, nullptr) != 0) {
    GTEST_SKIP() << "cannot mount ramfs (" << std::strerror(errno) << "); needs root";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  StoreOptions o = Opts(mnt);
  o.io_mode = IoMode::kDirect;
  auto refused = BlockStore::Open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("O_DIRECT refused"), std::string::npos)
      << refused.status().ToString();
  auto s = BlockStore::Open(Opts(mnt));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE((*s)->direct_io());
  ASSERT_TRUE(Put(**s, 1).ok());
  EXPECT_TRUE(Get(**s, 1).ok());
}

// Runs `body` in a child process as user nobody (root bypasses file permissions, so the check
// must drop privileges); returns the child's exit status, or -1 if the child died.
template <typename F>
int AsNobody(F body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) {
      ::_exit(100);
    }
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(StorageFaultTest, PermissionDeniedIsAClearErrorAndReadsKeepServing) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to drop privileges to nobody";
  }
  ScratchDir scratch;
  ::chmod(scratch.path().c_str(), 0755);  // mkdtemp made it 0700: let nobody in
  {
    auto s = BlockStore::Open(Opts(scratch.path()));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(Put(**s, 1).ok());
    ASSERT_TRUE(Put(**s, 2).ok());
    // Block 2's file becomes unreadable for the group.
    ASSERT_EQ(::chmod(BlockPath((*s)->model_dir(), HashOf(2)).c_str(), 0600), 0);
  }
  // Issue 17: the store is closed to others (0750 / 0640): nobody, outside root's group, cannot
  // even open it.
  EXPECT_EQ(AsNobody([&]() -> int { return BlockStore::Open(Opts(scratch.path())).ok() ? 1 : 0; }),
            0)
      << "a user outside the store's group opened it";
  // A reader in the store's group (the store's group becomes nobody's) reads what the group may.
  for (const auto& e : fs::recursive_directory_iterator(scratch.path())) {
    ASSERT_EQ(::lchown(e.path().c_str(), static_cast<uid_t>(-1), 65534), 0) << e.path();
  }
  // Child: a store over root's directory, as nobody (group member). Exit codes say which check
  // failed.
  int rc = AsNobody([&]() -> int {
    auto s = BlockStore::Open(Opts(scratch.path()));
    if (!s.ok()) {
      return 1;
    }
    if (!Get(**s, 1).ok()) {
      return 2;  // readable block must read
    }
    Status denied = Get(**s, 2);
    if (denied.code() != Code::kPermissionDenied) {
      return 3;
    }
    if ((*s)->stats().read_errors != 1 || (*s)->stats().corrupt != 0) {
      return 4;
    }
    Status w = Put(**s, 3);
    if (w.code() != Code::kPermissionDenied || w.message().empty()) {
      return 5;
    }
    if (!Get(**s, 1).ok()) {
      return 6;  // still serving after both errors
    }
    return 0;
  });
  EXPECT_EQ(rc, 0) << "child check failed (see the return codes in the test)";
  // Nothing was quarantined or published by the child.
  auto s = BlockStore::Open(Opts(scratch.path()));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(Get(**s, 2).ok());
  EXPECT_FALSE((*s)->Contains(HashOf(3)));
}

// A fault point that reports over a pipe that the writer reached it, then waits forever on a
// second pipe: the parent kills the writer exactly there, without sleeps.
class Trap : public StorageFaults {
 public:
  enum class Where { kBeforeWrite, kBeforePublish };
  Trap(Where where, kv::BlockHash target, int notify_fd, int wait_fd)
      : where_(where), target_(target), notify_fd_(notify_fd), wait_fd_(wait_fd) {}
  uint64_t WriteLimit(const kv::BlockHash& h, uint64_t bytes) override {
    if (where_ == Where::kBeforeWrite && h == target_) {
      Hold();
    }
    return bytes;
  }
  void BeforePublish(const kv::BlockHash& h) override {
    if (where_ == Where::kBeforePublish && h == target_) {
      Hold();
    }
  }

 private:
  void Hold() {
    char c = 'x';
    (void)!::write(notify_fd_, &c, 1);
    (void)!::read(wait_fd_, &c, 1);  // never written: blocks until killed
    ::_exit(99);
  }
  Where where_;
  kv::BlockHash target_;
  int notify_fd_, wait_fd_;
};

class KillTest : public ::testing::TestWithParam<Trap::Where> {};

TEST_P(KillTest, WriterKilledMidWriteLeavesNoPartialBlock) {
  ScratchDir scratch;
  const kv::BlockShape shape{4, 64, 4096};  // 1 MiB: large enough to be mid-flight
  int notify[2], hold[2];
  ASSERT_EQ(::pipe(notify), 0);
  ASSERT_EQ(::pipe(hold), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(notify[0]);
    ::close(hold[1]);
    Trap trap(GetParam(), HashOf(7), notify[1], hold[0]);
    StoreOptions o = Opts(scratch.path());
    o.faults = &trap;
    auto s = BlockStore::Open(o);
    if (!s.ok()) {
      ::_exit(1);
    }
    for (uint64_t i = 0; i < 10; ++i) {
      if (!Put(**s, i, shape).ok()) {
        ::_exit(2);
      }
    }
    ::_exit(3);  // the trap should have stopped us at block 7
  }
  ::close(notify[1]);
  ::close(hold[0]);
  char c;
  ASSERT_EQ(::read(notify[0], &c, 1), 1) << "writer never reached the fault point";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ::close(notify[0]);
  ::close(hold[1]);

  // A store opened now (the dead writer's temporary file removed by the scan) serves blocks
  // 0..6, misses 7, and accepts 7 again.
  std::string model_dir;
  {
    StoreOptions o = Opts(scratch.path());
    o.scan_on_open = false;  // first look at the raw state
    auto s = BlockStore::Open(o);
    ASSERT_TRUE(s.ok());
    model_dir = (*s)->model_dir();
    EXPECT_EQ(CountTmp(model_dir), 1u) << "the killed writer's temporary file";
    EXPECT_FALSE((*s)->Contains(HashOf(7)));
    EXPECT_EQ(Get(**s, 7, shape).code(), Code::kStorageMiss);
  }
  auto s = BlockStore::Open(Opts(scratch.path()));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->stats().tmp_cleaned, 1u);
  EXPECT_EQ(CountTmp(model_dir), 0u);
  for (uint64_t i = 0; i < 7; ++i) {
    EXPECT_TRUE(Get(**s, i, shape).ok()) << i;
  }
  EXPECT_EQ(Get(**s, 7, shape).code(), Code::kStorageMiss);
  EXPECT_EQ((*s)->stats().corrupt, 0u);
  ASSERT_TRUE(Put(**s, 7, shape).ok());
  EXPECT_TRUE(Get(**s, 7, shape).ok());
}

INSTANTIATE_TEST_SUITE_P(Points, KillTest,
                         ::testing::Values(Trap::Where::kBeforeWrite, Trap::Where::kBeforePublish),
                         [](const auto& info) {
                           return info.param == Trap::Where::kBeforeWrite ? "BeforeWrite"
                                                                          : "BeforePublish";
                         });

}  // namespace
}  // namespace dualpath::storage
