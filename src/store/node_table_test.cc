// The store node's replica table rules (Record replaces same-key and overlapping records, Forget,
// Check) and its DRAM tier file (created, a stale one replaced, a live one refused, removed).
#include "store/node_table.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "dualpath/store/node.h"
#include "store/node_shm.h"

namespace dualpath::store {
namespace {

ObjectKey Key(uint8_t n, uint64_t model = 7) {
  ObjectKey k;
  k.model_fingerprint = model;
  k.hash.bytes[0] = n;
  k.hash.bytes[31] = static_cast<uint8_t>(n * 3 + 1);
  return k;
}

NodeRecord Rec(uint8_t n, uint64_t offset, uint64_t size, Tier tier = Tier::kDram) {
  return NodeRecord{Key(n), tier, offset, size, 1000u + n};
}

NodeReplicaTable Table() { return NodeReplicaTable({1 << 20, 0}); }

TEST(NodeReplicaTableTest, RecordAndForget) {
  NodeReplicaTable t = Table();
  EXPECT_EQ(t.Record(Rec(1, 0, 4096)), 0u);
  EXPECT_EQ(t.Record(Rec(2, 4096, 4096)), 0u);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.used(Tier::kDram), 8192u);
  EXPECT_TRUE(t.Forget(Key(1)));
  EXPECT_FALSE(t.Forget(Key(1)));  // already gone: no error, nothing forgotten
  EXPECT_FALSE(t.Forget(Key(9)));
  ASSERT_EQ(t.Records().size(), 1u);
  EXPECT_EQ(t.Records()[0], Rec(2, 4096, 4096));
  EXPECT_EQ(t.used(Tier::kDram), 4096u);
}

TEST(NodeReplicaTableTest, ARecordReplacesTheSameKeysEarlierRecord) {
  NodeReplicaTable t = Table();
  t.Record(Rec(1, 0, 4096));
  NodeRecord moved = Rec(1, 65536, 8192);
  EXPECT_EQ(t.Record(moved), 1u);
  ASSERT_EQ(t.Records().size(), 1u);
  EXPECT_EQ(t.Records()[0], moved);
  EXPECT_EQ(t.used(Tier::kDram), 8192u);
  // The old place is free again: a record there replaces nothing.
  EXPECT_EQ(t.Record(Rec(2, 0, 4096)), 0u);
  EXPECT_EQ(t.size(), 2u);
}

TEST(NodeReplicaTableTest, ARecordReplacesEveryOverlappingRecordAndNoNeighbour) {
  NodeReplicaTable t = Table();
  t.Record(Rec(1, 0, 4096));      // [0, 4096): touches the new record's start, no overlap
  t.Record(Rec(2, 4096, 4096));   // [4096, 8192): overlaps from the left
  t.Record(Rec(3, 8192, 4096));   // inside
  t.Record(Rec(4, 12288, 8192));  // [12288, 20480): overlaps at the right end
  t.Record(Rec(5, 20480, 4096));  // starts where the new record ends: no overlap
  // New record [6000, 14000) overlaps 2, 3 and 4.
  EXPECT_EQ(t.Record(Rec(6, 6000, 8000)), 3u);
  std::vector<NodeRecord> all = t.Records();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].key, Key(1));
  EXPECT_EQ(all[1].key, Key(6));
  EXPECT_EQ(all[2].key, Key(5));
  EXPECT_EQ(t.used(Tier::kDram), 4096u + 8000u + 4096u);
  // A record starting before an existing one and ending inside it.
  EXPECT_EQ(t.Record(Rec(7, 20000, 1000)), 1u);
  EXPECT_FALSE(t.Forget(Key(5)));
}

TEST(NodeReplicaTableTest, SameKeyAndOverlapAtOnce) {
  NodeReplicaTable t = Table();
  t.Record(Rec(1, 0, 4096));
  t.Record(Rec(2, 4096, 4096));
  // Key 1 moves onto key 2's bytes: both earlier records go.
  EXPECT_EQ(t.Record(Rec(1, 4096, 4096)), 2u);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t.Records()[0], Rec(1, 4096, 4096));
}

TEST(NodeReplicaTableTest, TiersDoNotOverlapEachOther) {
  NodeReplicaTable t({1 << 20, 1 << 20});
  t.Record(Rec(1, 0, 4096, Tier::kDram));
  EXPECT_EQ(t.Record(Rec(2, 0, 4096, Tier::kSsd)), 0u);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.used(Tier::kSsd), 4096u);
}

TEST(NodeReplicaTableTest, CheckRefusesWhatCannotBeOnThisNode) {
  NodeReplicaTable t = Table();
  EXPECT_TRUE(t.Check(Rec(1, 0, 4096)).ok());
  EXPECT_TRUE(t.Check(Rec(1, (1 << 20) - 4096, 4096)).ok());
  Status zero = t.Check(Rec(1, 0, 0));
  EXPECT_EQ(zero.code(), Code::kInvalidArgument);
  EXPECT_NE(zero.message().find("size 0"), std::string::npos) << zero.ToString();
  Status past = t.Check(Rec(1, (1 << 20) - 4096, 4097));
  EXPECT_EQ(past.code(), Code::kInvalidArgument);
  EXPECT_NE(past.message().find("run past"), std::string::npos) << past.ToString();
  EXPECT_EQ(t.Check(Rec(1, UINT64_MAX - 10, 4096)).code(), Code::kInvalidArgument);
  Status ssd = t.Check(Rec(1, 0, 4096, Tier::kSsd));
  EXPECT_EQ(ssd.code(), Code::kInvalidArgument);
  EXPECT_NE(ssd.message().find("no ssd tier"), std::string::npos) << ssd.ToString();
  EXPECT_EQ(t.Check(Rec(1, 0, 4096, static_cast<Tier>(9))).code(), Code::kInvalidArgument);
}

class ShmTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dualpath-shmtier-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = StoreNode::ShmPath(dir_, "c1", NodeId(3));
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(ShmTierTest, CreatedReservedSharedAndRemoved) {
  EXPECT_EQ(path_, dir_ + "/dualpath-store-c1-3");
  auto tier = ShmTier::Create(path_, 1 << 16);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 16);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A client's mapping sees the node's bytes and the other way round.
  auto client = ShmTier::Open(path_, 1 << 16);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  (*tier)->data()[100] = 42;
  EXPECT_EQ((*client)->data()[100], 42);
  (*client)->data()[200] = 7;
  EXPECT_EQ((*tier)->data()[200], 7);
  // A client refuses a file smaller than the node advertises.
  EXPECT_EQ(ShmTier::Open(path_, 1 << 17).status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE((*tier)->RemoveFile().ok());
  EXPECT_NE(::access(path_.c_str(), F_OK), 0);
  EXPECT_FALSE((*client)->StillAtPath());
}

TEST_F(ShmTierTest, ALiveNodesFileIsRefusedAStaleOneReplaced) {
  auto created = ShmTier::Create(path_, 1 << 16);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<ShmTier> live = std::move(created).value();
  live->data()[0] = 99;
  auto second = ShmTier::Create(path_, 1 << 16);
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists) << second.status().ToString();
  EXPECT_TRUE(live->StillAtPath());
  // The first node dies without removing its file (its lock goes with it).
  live.reset();
  ASSERT_EQ(::access(path_.c_str(), F_OK), 0);
  auto fresh = ShmTier::Create(path_, 1 << 17);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ((*fresh)->size(), 1u << 17);
  EXPECT_EQ((*fresh)->data()[0], 0);  // a new file, not the dead node's bytes
}

TEST_F(ShmTierTest, NotARegularFileIsRefused) {
  ASSERT_EQ(::mkdir(path_.c_str(), 0700), 0);
  EXPECT_EQ(ShmTier::Create(path_, 4096).status().code(), Code::kFailedPrecondition);
  ::rmdir(path_.c_str());
}

}  // namespace
}  // namespace dualpath::store
