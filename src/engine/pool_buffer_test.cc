// PoolBuffer: the engine's buffer region as an owner-bound root of the node's pool.
#include "engine/pool_buffer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace dualpath::engine {
namespace {

class PoolBufferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/dev/shm/dp-poolbuf-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/node.pool";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<pool::Pool> Observer() {
    pool::OpenOptions o;
    o.background_thread = false;
    auto p = pool::Pool::Open(path_, o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  std::string dir_, path_;
};

constexpr uint64_t kMiB = 1 << 20;

TEST_F(PoolBufferTest, CreatesThePoolTakesTheRootAndGivesItBack) {
  auto b = PoolBuffer::Attach(path_, 64 * kMiB, "engine/d0.0", 8 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->size(), 8 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*b)->data()) % 4096, 0u);  // KvArena needs pages
  // Zeroed, and writable through the mapping.
  EXPECT_TRUE(std::all_of((*b)->data(), (*b)->data() + (*b)->size(),
                          [](std::byte x) { return x == std::byte{0}; }));
  (*b)->data()[8 * kMiB - 1] = std::byte{7};
  auto obs = Observer();
  ASSERT_NE(obs, nullptr);
  pool::PoolStats s = obs->Stats();
  ASSERT_EQ(s.root_list.size(), 1u);
  EXPECT_EQ(s.root_list[0].name, "engine/d0.0");
  EXPECT_EQ(s.root_list[0].bytes, 8 * kMiB);
  EXPECT_EQ(s.root_list[0].lifetime, pool::RootLifetime::kProcess);
  EXPECT_EQ(s.root_list[0].owner_pid, getpid());
  EXPECT_GE(s.num_chunks * s.chunk_bytes, 64 * kMiB);  // created with the asked data size
  Result<std::span<std::byte>> seen = obs->GetRoot("engine/d0.0");
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ((*seen)[8 * kMiB - 1], std::byte{7});  // the same shared memory
  b->reset();                                      // clean exit
  s = obs->Stats();
  EXPECT_EQ(s.roots, 0u);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_TRUE(std::filesystem::exists(path_));  // the node's pool stays for other engines
}

TEST_F(PoolBufferTest, SecondLiveEngineWithTheSameNameIsRefused) {
  auto first = PoolBuffer::Attach(path_, 64 * kMiB, "engine/p0.0", 8 * kMiB);
  ASSERT_TRUE(first.ok());
  auto second = PoolBuffer::Attach(path_, 64 * kMiB, "engine/p0.0", 8 * kMiB);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists);
  EXPECT_NE(second.status().message().find("another live engine"), std::string::npos)
      << second.status().ToString();
  // The refused one did not touch the holder's root.
  auto obs = Observer();
  ASSERT_NE(obs, nullptr);
  ASSERT_EQ(obs->Stats().roots, 1u);
  EXPECT_EQ(obs->Stats().root_list[0].owner_pid, getpid());
  // Another name shares the same pool (created once, never re-formatted).
  auto other = PoolBuffer::Attach(path_, 1 * kMiB, "engine/d0.0", 8 * kMiB);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(obs->Stats().roots, 2u);
}

TEST_F(PoolBufferTest, PoolTooSmallSaysWhatToChange) {
  auto first = PoolBuffer::Attach(path_, 16 * kMiB, "engine/d0.0", 12 * kMiB);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto big = PoolBuffer::Attach(path_, 16 * kMiB, "engine/d1.0", 12 * kMiB);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kPoolFull) << big.status().ToString();
  EXPECT_NE(big.status().message().find("--pool-mib"), std::string::npos)
      << big.status().ToString();
  EXPECT_NE(big.status().message().find(path_), std::string::npos);
}

TEST_F(PoolBufferTest, NotAPoolIsAClearError) {
  {
    FILE* f = fopen(path_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(std::string(8192, 'x').c_str(), f);
    fclose(f);
  }
  auto b = PoolBuffer::Attach(path_, 16 * kMiB, "engine/d0.0", 4 * kMiB);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(path_), std::string::npos) << b.status().ToString();
  EXPECT_EQ(std::filesystem::file_size(path_), 8192u);  // not clobbered
}

}  // namespace
}  // namespace dualpath::engine
