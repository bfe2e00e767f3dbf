#include "dualpath/testbed/read_rate.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace dualpath::testbed {
namespace {

namespace fs = std::filesystem;

// Every reading of the clock is 10 ms after the previous one.
class TickClock final : public Clock {
 public:
  Nanos Now() const override { return ticks_++ * 10 * kNanosPerMilli; }

 private:
  mutable Nanos ticks_ = 0;
};

class ReadRateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("dualpath_read_rate_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  fs::path dir_;
};

TEST_F(ReadRateTest, ReadsWholeFileAndCountsBlocks) {
  // 10 blocks of 4 KiB; the "counter" is a regular file with a fixed value, so its delta is 0.
  const std::string file = Write("data", std::string(10 * 4096, 'x'));
  const std::string counter = Write("rx_bytes", "12345\n");
  ReadRateOptions o{.path = file, .block_bytes = 4096, .rx_counter = counter, .streams = 1};
  auto r = MeasureRead(o, TickClock());
  if (!r.ok() && r.status().code() == Code::kInvalidArgument) {
    GTEST_SKIP() << "O_DIRECT not supported on " << dir_ << ": " << r.status().ToString();
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->file_bytes, 10u * 4096);
  // Clock readings: the start (0 ms), then one after each block (10..100 ms); EOF takes none.
  EXPECT_EQ(r->elapsed, 100 * kNanosPerMilli);
  EXPECT_EQ(r->link_bytes, 0u);
  EXPECT_DOUBLE_EQ(r->file_bps, 10.0 * 4096 * 8 / 0.1);
  // Steady window: from the sample at 1 block (10%) to the one at 9 blocks (90%).
  EXPECT_EQ(r->steady_window, 80 * kNanosPerMilli);
}

TEST_F(ReadRateTest, StreamsCoverTheFileExactlyOnce) {
  // 37 blocks and a partial one, over 4 streams (ranges of 10 blocks, the last one shorter).
  const uint64_t size = 37 * 4096 + 100;
  const std::string file = Write("data", std::string(size, 'y'));
  for (int streams : {1, 3, 4, 64}) {
    ReadRateOptions o{.path = file, .block_bytes = 4096, .streams = streams};
    auto r = MeasureRead(o, SteadyClock::Default());
    if (!r.ok() && r.status().code() == Code::kInvalidArgument) {
      GTEST_SKIP() << r.status().ToString();
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->file_bytes, size) << streams << " streams";
  }
}

TEST_F(ReadRateTest, Errors) {
  ReadRateOptions o{.path = (dir_ / "missing").string()};
  EXPECT_EQ(MeasureRead(o, TickClock()).status().code(), Code::kNotFound);
  o.path = Write("data", std::string(4096, 'x'));
  o.block_bytes = 1000;
  EXPECT_EQ(MeasureRead(o, TickClock()).status().code(), Code::kInvalidArgument);
  o.block_bytes = 4096;
  o.streams = 0;
  EXPECT_EQ(MeasureRead(o, TickClock()).status().code(), Code::kInvalidArgument);
  o.streams = 1;
  o.rx_counter = (dir_ / "no_counter").string();
  auto r = MeasureRead(o, TickClock());
  if (r.status().code() != Code::kInvalidArgument) {  // O_DIRECT unsupported shows up first
    EXPECT_EQ(r.status().code(), Code::kNotFound);
    EXPECT_NE(r.status().message().find("no_counter"), std::string::npos);
  }
}

}  // namespace
}  // namespace dualpath::testbed
