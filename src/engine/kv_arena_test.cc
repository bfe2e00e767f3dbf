// Unit tests of KvArena: first-fit allocation, coalescing, token limit, refusal, cancel.
#include "engine/kv_arena.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace dualpath::engine {
namespace {

auto Soon() { return std::chrono::steady_clock::now() + std::chrono::seconds(30); }
auto Past() { return std::chrono::steady_clock::now() - std::chrono::seconds(1); }

TEST(KvArenaTest, AllocatesFreesAndCoalesces) {
  std::vector<std::byte> mem(64 << 10);
  KvArena a(mem.data(), mem.size(), 0);
  EXPECT_EQ(a.capacity(), 64u << 10);
  auto p1 = a.Allocate(4096, 1, Soon());
  auto p2 = a.Allocate(5000, 2, Soon());  // rounds up to 8192
  auto p3 = a.Allocate(4096, 3, Soon());
  ASSERT_TRUE(p1.ok() && p2.ok() && p3.ok());
  EXPECT_EQ(*p1, mem.data());
  EXPECT_EQ(*p2, mem.data() + 4096);
  EXPECT_EQ(*p3, mem.data() + 12288);
  EXPECT_EQ(a.used_bytes(), 16384u);
  EXPECT_EQ(a.used_tokens(), 6);
  a.Free(*p1);
  a.Free(*p2);
  // The two freed neighbours coalesced: a 12 KiB area fits at the start again.
  auto p4 = a.Allocate(12288, 1, Soon());
  ASSERT_TRUE(p4.ok());
  EXPECT_EQ(*p4, mem.data());
  a.Free(*p3);
  a.Free(*p4);
  EXPECT_EQ(a.used_bytes(), 0u);
  // Everything coalesced back into one range: the whole region is allocatable.
  auto all = a.Allocate(64 << 10, 1, Soon());
  ASSERT_TRUE(all.ok());
  a.Free(*all);
}

TEST(KvArenaTest, RefusesWhatCanNeverFitAndTimesOutWhenFull) {
  std::vector<std::byte> mem(16 << 10);
  KvArena a(mem.data(), mem.size(), 10);
  auto big = a.Allocate(32 << 10, 1, Soon());
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kEngineNoRoom);
  auto many = a.Allocate(4096, 11, Soon());
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), Code::kEngineNoRoom);
  auto p = a.Allocate(4096, 8, Soon());
  ASSERT_TRUE(p.ok());
  // Bytes are free but the token limit is reached: with a past deadline it fails at once.
  auto q = a.Allocate(4096, 3, Past());
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), Code::kTimeout);
  a.Free(*p);
}

TEST(KvArenaTest, WaiterGetsMemoryWhenFreedAndCancelWakesWaiters) {
  std::vector<std::byte> mem(8 << 10);
  KvArena a(mem.data(), mem.size(), 0);
  auto p = a.Allocate(8 << 10, 1, Soon());
  ASSERT_TRUE(p.ok());
  Result<std::byte*> got = Status(Code::kInternal, "unset");
  std::thread waiter([&] { got = a.Allocate(4096, 1, Soon()); });
  a.Free(*p);  // the waiter either waits and is woken, or finds the memory free
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // Now full again (4 KiB used, a waiter for 8 KiB); Cancel makes it fail.
  Result<std::byte*> cancelled = Status(Code::kInternal, "unset");
  std::thread waiter2([&] { cancelled = a.Allocate(8 << 10, 1, Soon()); });
  a.Cancel();
  waiter2.join();
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.status().code(), Code::kEngineStopped);
}

}  // namespace
}  // namespace dualpath::engine
