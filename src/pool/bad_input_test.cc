// Bad input never changes an existing region and always names what was wrong.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "dualpath/pool/pool.h"
#include "pool/layout.h"
#include "pool/test_util.h"

namespace dualpath::pool {
namespace {

using testing::TempDir;

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::vector<char>& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

Geometry Small() {
  Geometry g;
  g.chunk_bytes = 64 << 10;
  g.region_bytes = 2 << 20;
  g.max_procs = 4;
  g.pin_records = 16;
  g.num_nodes = 2;
  return g;
}

OpenOptions Opts(const TempDir& d) {
  OpenOptions o;
  o.background_thread = false;
  o.local_dir = d.path();
  return o;
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("region");
    ASSERT_TRUE(Pool::Create(path_, Small()).ok());
  }
  // Opens a damaged copy of the region; expects `code` and that the file is unchanged.
  void ExpectOpenFails(const std::vector<char>& bytes, Code code, const std::string& needle) {
    const std::string bad = dir_.File("bad");
    WriteAll(bad, bytes);
    Result<std::unique_ptr<Pool>> p = Pool::Open(bad, Opts(dir_));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), code) << p.status().ToString();
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().ToString();
    EXPECT_EQ(ReadAll(bad), bytes) << "a failed open modified the file";
    EXPECT_EQ(Pool::Destroy(bad).code(), code);  // destroy refuses it too, and keeps it
    EXPECT_EQ(ReadAll(bad), bytes);
  }

  TempDir dir_;
  std::string path_;
};

TEST_F(BadInputTest, WrongMagic) {
  std::vector<char> b = ReadAll(path_);
  b[0] ^= 0x01;
  ExpectOpenFails(b, Code::kPoolBadMagic, "not a dualpath pool region");
}

TEST_F(BadInputTest, WrongVersion) {
  std::vector<char> b = ReadAll(path_);
  b[offsetof(internal::RegionHeader, version)] = 7;
  ExpectOpenFails(b, Code::kPoolBadVersion, "version 7");
}

TEST_F(BadInputTest, TruncatedRegion) {
  std::vector<char> b = ReadAll(path_);
  b.resize(b.size() / 2);
  ExpectOpenFails(b, Code::kPoolTooSmall, "header says");
  ExpectOpenFails(std::vector<char>(100, 'x'), Code::kPoolTooSmall, "smaller than a pool header");
}

TEST_F(BadInputTest, CorruptedGeometry) {
  std::vector<char> b = ReadAll(path_);
  b[offsetof(internal::RegionHeader, data_off)] ^= 0x40;
  ExpectOpenFails(b, Code::kCorruption, "offsets disagree");
}

TEST_F(BadInputTest, ForeignFile) {
  std::vector<char> text(10000, 'a');
  ExpectOpenFails(text, Code::kPoolBadMagic, "not a dualpath pool region");
  // A directory and a missing path.
  Result<std::unique_ptr<Pool>> d = Pool::Open(dir_.path(), Opts(dir_));
  EXPECT_FALSE(d.ok());
  Result<std::unique_ptr<Pool>> m = Pool::Open(dir_.File("missing"), Opts(dir_));
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_NE(m.status().message().find("missing"), std::string::npos);
}

TEST_F(BadInputTest, CreateRefusesExistingAndTooSmall) {
  const std::vector<char> before = ReadAll(path_);
  EXPECT_EQ(Pool::Create(path_, Small()).code(), Code::kAlreadyExists);
  EXPECT_EQ(ReadAll(path_), before);
  Geometry tiny = Small();
  tiny.region_bytes = 100 << 10;
  Status s = Pool::Create(dir_.File("tiny"), tiny);
  EXPECT_EQ(s.code(), Code::kPoolTooSmall);
  EXPECT_NE(s.message().find("needs at least"), std::string::npos);
  EXPECT_NE(access(dir_.File("tiny").c_str(), F_OK), 0) << "a failed create left a file";
  Geometry odd = Small();
  odd.chunk_bytes = 3000;
  EXPECT_EQ(Pool::Create(dir_.File("odd"), odd).code(), Code::kInvalidArgument);
}

TEST_F(BadInputTest, BlockLargerThanRegionChangesNothing) {
  auto p = Pool::Open(path_, Opts(dir_));
  ASSERT_TRUE(p.ok());
  std::vector<std::byte> one(1000, std::byte{1});
  ASSERT_TRUE((*p)->Put(testing::MakeHash(1), one).ok());
  const PoolStats before = (*p)->Stats();
  Result<WriteHandle> w = (*p)->Reserve(testing::MakeHash(2), 64ull << 20);
  EXPECT_EQ(w.status().code(), Code::kInvalidArgument);
  const PoolStats after = (*p)->Stats();
  EXPECT_EQ(after.ready_entries, before.ready_entries);
  EXPECT_EQ(after.free_chunks, before.free_chunks);
  EXPECT_TRUE((*p)->Contains(testing::MakeHash(1)));
}

TEST_F(BadInputTest, NodeOutOfRange) {
  Geometry g = Small();
  g.model = MemoryModel::kNonCoherent;
  ASSERT_TRUE(Pool::Create(dir_.File("nc"), g).ok());
  OpenOptions o = Opts(dir_);
  o.node = 5;
  Result<std::unique_ptr<Pool>> p = Pool::Open(dir_.File("nc"), o);
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("node 5"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::pool
