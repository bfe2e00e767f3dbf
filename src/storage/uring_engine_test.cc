#include "storage/uring_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "dualpath/storage/aligned_buffer.h"

namespace dualpath::storage::internal {
namespace {

class UringEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/dp_uring_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(UringEngineTest, RejectsBadDepth) {
  EXPECT_EQ(UringEngine::Create(0).status().code(), Code::kInvalidArgument);
}

TEST_F(UringEngineTest, WritesThenReadsManyFilesWithFewSlots) {
  auto engine = UringEngine::Create(4);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  constexpr size_t kFiles = 13;
  constexpr size_t kBytes = 3 * kIoAlign;
  std::mt19937_64 rng(7);
  std::vector<AlignedBuffer> data;
  std::vector<int> fds;
  for (size_t i = 0; i < kFiles; ++i) {
    AlignedBuffer b(kBytes);
    for (auto& x : b.span()) {
      x = static_cast<std::byte>(rng());
    }
    data.push_back(std::move(b));
    std::string path = dir_ + "/f" + std::to_string(i);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  size_t completed = 0;
  Status st = (*engine)->Run(
      kFiles,
      [&](size_t i, IoOp& op) {
        op.kind = IoKind::kWrite;
        op.fd = fds[i];
        op.buf = data[i].data();
        op.len = kBytes;
        return true;
      },
      [&](size_t, IoOp& op) {
        EXPECT_EQ(op.error, 0);
        EXPECT_EQ(op.done, kBytes);
        ++completed;
      });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(completed, kFiles);

  // Read back with a buffer larger than the file: the read stops at end of file.
  std::vector<AlignedBuffer> back;
  for (size_t i = 0; i < kFiles; ++i) {
    back.emplace_back(kBytes + kIoAlign);
  }
  std::vector<uint64_t> got(kFiles, 0);
  st = (*engine)->Run(
      kFiles,
      [&](size_t i, IoOp& op) {
        if (i == 5) {
          return false;  // skipped: never completed
        }
        op.fd = fds[i];
        op.buf = back[i].data();
        op.len = back[i].capacity();
        return true;
      },
      [&](size_t i, IoOp& op) {
        EXPECT_EQ(op.error, 0);
        got[i] = op.done;
      });
  ASSERT_TRUE(st.ok());
  for (size_t i = 0; i < kFiles; ++i) {
    if (i == 5) {
      EXPECT_EQ(got[i], 0u);
      continue;
    }
    ASSERT_EQ(got[i], kBytes) << i;
    EXPECT_EQ(std::memcmp(back[i].data(), data[i].data(), kBytes), 0) << i;
  }
  for (int fd : fds) {
    ::close(fd);
  }
}

TEST_F(UringEngineTest, ReportsErrnoOfFailedOperation) {
  auto engine = UringEngine::Create(2);
  ASSERT_TRUE(engine.ok());
  AlignedBuffer b(kIoAlign);
  int error = 0;
  Status st = (*engine)->Run(
      1,
      [&](size_t, IoOp& op) {
        op.fd = 1 << 20;  // not an open descriptor
        op.buf = b.data();
        op.len = b.capacity();
        return true;
      },
      [&](size_t, IoOp& op) { error = op.error; });
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(error, EBADF);
}

TEST_F(UringEngineTest, RegisteredBuffersReadFixed) {
  auto engine = UringEngine::Create(2);
  ASSERT_TRUE(engine.ok());
  AlignedBuffer src(kIoAlign * 2);
  std::memset(src.data(), 0x5a, src.capacity());
  std::string path = dir_ + "/fixed";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, src.data(), src.capacity(), 0), static_cast<ssize_t>(src.capacity()));
  AlignedBuffer dst(kIoAlign * 2);
  iovec iov{dst.data(), dst.capacity()};
  ASSERT_TRUE((*engine)->RegisterBuffers({&iov, 1}).ok());
  uint64_t done = 0;
  ASSERT_TRUE((*engine)
                  ->Run(
                      1,
                      [&](size_t, IoOp& op) {
                        op.fd = fd;
                        op.buf = dst.data();
                        op.len = dst.capacity();
                        op.buf_index = 0;
                        return true;
                      },
                      [&](size_t, IoOp& op) { done = op.done; })
                  .ok());
  EXPECT_EQ(done, dst.capacity());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), dst.capacity()), 0);
  ::close(fd);
}

}  // namespace
}  // namespace dualpath::storage::internal
