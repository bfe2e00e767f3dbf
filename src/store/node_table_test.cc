// The store node's replica table rules (Record replaces same-key and overlapping records, Forget,
// Check), its DRAM tier file (created with its header, a stale one replaced, a live one refused,
// removed; a client maps only the node's own file) and the key-bound object checksum.
#include "store/node_table.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dualpath/kv/block_file.h"
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
    for (const std::string& p : extra_) ::unlink(p.c_str());
    ::rmdir(dir_.c_str());
  }
  static TierIdentity Id(uint64_t incarnation = 0xABCD) {
    return TierIdentity{"c1", NodeId(3), incarnation};
  }
  // What a client beside node 3 of cluster c1 expects.
  TierExpectation Expect(uint64_t bytes, uint64_t incarnation = 0xABCD) const {
    return TierExpectation{dir_, Id(incarnation), bytes, ::geteuid()};
  }
  std::string dir_, path_;
  std::vector<std::string> extra_;
};

TEST_F(ShmTierTest, CreatedReservedSharedAndRemoved) {
  EXPECT_EQ(path_, dir_ + "/dualpath-store-c1-3");
  auto tier = ShmTier::Create(path_, 1 << 16, Id());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(kTierHeaderBytes + (1 << 16)));  // header page + data
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ((*tier)->size(), 1u << 16);
  EXPECT_EQ((*tier)->incarnation(), 0xABCDu);
  // A client's mapping sees the node's bytes and the other way round.
  auto client = ShmTier::Open(path_, Expect(1 << 16));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  (*tier)->data()[100] = 42;
  EXPECT_EQ((*client)->data()[100], 42);
  (*client)->data()[200] = 7;
  EXPECT_EQ((*tier)->data()[200], 7);
  // A client refuses a file smaller than the node advertises.
  EXPECT_EQ(ShmTier::Open(path_, Expect(1 << 17)).status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE((*tier)->RemoveFile().ok());
  EXPECT_NE(::access(path_.c_str(), F_OK), 0);
  EXPECT_FALSE((*client)->StillAtPath());
}

TEST_F(ShmTierTest, ALiveNodesFileIsRefusedAStaleOneReplaced) {
  auto created = ShmTier::Create(path_, 1 << 16, Id());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<ShmTier> live = std::move(created).value();
  live->data()[0] = 99;
  auto second = ShmTier::Create(path_, 1 << 16, Id(0x1234));
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists) << second.status().ToString();
  EXPECT_TRUE(live->StillAtPath());
  // The first node dies without removing its file (its lock goes with it).
  live.reset();
  ASSERT_EQ(::access(path_.c_str(), F_OK), 0);
  auto fresh = ShmTier::Create(path_, 1 << 17, Id(0x1234));
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ((*fresh)->size(), 1u << 17);
  EXPECT_EQ((*fresh)->data()[0], 0);  // a new file, not the dead node's bytes
  // A client that still expects the dead incarnation does not take the new file for it.
  Status stale = ShmTier::Open(path_, Expect(1 << 17, 0xABCD)).status();
  EXPECT_EQ(stale.code(), Code::kFailedPrecondition);
  EXPECT_NE(stale.message().find("incarnation"), std::string::npos) << stale.ToString();
  EXPECT_TRUE(ShmTier::Open(path_, Expect(1 << 17, 0x1234)).ok());
}

TEST_F(ShmTierTest, NotARegularFileIsRefused) {
  ASSERT_EQ(::mkdir(path_.c_str(), 0700), 0);
  EXPECT_EQ(ShmTier::Create(path_, 4096, Id()).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(ShmTier::Open(path_, Expect(4096)).status().code(), Code::kFailedPrecondition);
  ::rmdir(path_.c_str());
}

// A location a peer supplied (the shm path and incarnation in a JoinNode, passed on by the
// master) is mapped only if the file is the node's own: each way of pointing a client elsewhere
// is refused with its reason, and the file's bytes stay as they were.
TEST_F(ShmTierTest, AClientMapsOnlyTheNodesOwnFile) {
  constexpr uint64_t kBytes = 1 << 16;
  auto refused = [&](const std::string& path, const TierExpectation& e, const char* why) {
    Result<std::unique_ptr<ShmTier>> r = ShmTier::Open(path, e);
    EXPECT_FALSE(r.ok()) << path << " was mapped; expected refusal: " << why;
    if (r.ok()) return;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
  };
  // Any other file, however large, is not the path this client names for node 3.
  const std::string other = dir_ + "/victim";
  extra_.push_back(other);
  {
    std::string text(kTierHeaderBytes + kBytes, 'v');
    FILE* f = std::fopen(other.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
    std::fclose(f);
  }
  refused(other, Expect(kBytes), "is not this client's path");
  refused(dir_ + "/../" + dir_.substr(5) + "/victim", Expect(kBytes), "is not this client's path");
  // Another directory than the client's, even with the right file name.
  TierExpectation elsewhere = Expect(kBytes);
  elsewhere.shm_dir = "/dev/shm";
  refused(path_, elsewhere, "is not this client's path");
  // The right path, but a symbolic link to the other file.
  ASSERT_EQ(::symlink(other.c_str(), path_.c_str()), 0);
  refused(path_, Expect(kBytes), "symbolic link");
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  // The right path, but a plain file without a tier header (someone put it there).
  ASSERT_EQ(::link(other.c_str(), path_.c_str()), 0);
  refused(path_, Expect(kBytes), "bad magic");
  ASSERT_EQ(::unlink(path_.c_str()), 0);

  // A real tier file, but not the one expected: cluster, node, incarnation, size, owner, mode.
  auto tier = ShmTier::Create(path_, kBytes, Id());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  TierExpectation e = Expect(kBytes);
  e.identity.cluster = "c2";
  e.shm_dir = dir_;
  // (c2's path differs, so name the file as c2's by a hard link under c2's name.)
  const std::string c2_path = StoreNode::ShmPath(dir_, "c2", NodeId(3));
  extra_.push_back(c2_path);
  ASSERT_EQ(::link(path_.c_str(), c2_path.c_str()), 0);
  refused(c2_path, e, "belongs to cluster 'c1'");
  const std::string n4_path = StoreNode::ShmPath(dir_, "c1", NodeId(4));
  extra_.push_back(n4_path);
  ASSERT_EQ(::link(path_.c_str(), n4_path.c_str()), 0);
  TierExpectation n4 = Expect(kBytes);
  n4.identity.node = NodeId(4);
  refused(n4_path, n4, "belongs to node 3");
  refused(path_, Expect(kBytes, 0x9999), "incarnation");
  refused(path_, Expect(kBytes * 2), "has ");
  TierExpectation owner = Expect(kBytes);
  owner.owner = ::geteuid() + 1;
  refused(path_, owner, "is owned by uid");
  ASSERT_EQ(::chmod(path_.c_str(), 0660), 0);
  refused(path_, Expect(kBytes), "writable by group or others");
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  // A damaged header (its checksum no longer matches).
  uint8_t* header = (*tier)->data() - kTierHeaderBytes;
  header[20] ^= 1;  // inside the cluster name
  refused(path_, Expect(kBytes), "checksum");
  header[20] ^= 1;
  EXPECT_TRUE(ShmTier::Open(path_, Expect(kBytes)).ok());
  // The refused file at the other path was never written.
  FILE* f = std::fopen(other.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string back(kTierHeaderBytes + kBytes, '\0');
  ASSERT_EQ(std::fread(back.data(), 1, back.size(), f), back.size());
  std::fclose(f);
  EXPECT_EQ(back, std::string(kTierHeaderBytes + kBytes, 'v'));
}

TEST(TierFileHeaderTest, LayoutAndRoundTrip) {
  const TierFileHeader h = MakeTierFileHeader(TierIdentity{"cluster-x", NodeId(7), 42}, 8192);
  EXPECT_EQ(h.magic, kTierFileMagic);
  EXPECT_EQ(std::memcmp(&h.magic, "DPSTIER1", 8), 0);
  EXPECT_EQ(h.version, kTierFileVersion);
  EXPECT_EQ(h.header_bytes, kTierHeaderBytes);
  EXPECT_EQ(std::string(h.cluster), "cluster-x");
  EXPECT_EQ(h.node_id, 7u);
  EXPECT_EQ(h.incarnation, 42u);
  EXPECT_EQ(h.data_bytes, 8192u);
  EXPECT_TRUE(
      CheckTierFileHeader(h, TierExpectation{"/x", {"cluster-x", NodeId(7), 42}, 8192, 0}, "f")
          .ok());
  // A 64-character cluster name fills the field without a terminating NUL.
  const std::string long_name(64, 'n');
  const TierFileHeader full = MakeTierFileHeader(TierIdentity{long_name, NodeId(1), 1}, 4096);
  EXPECT_TRUE(
      CheckTierFileHeader(full, TierExpectation{"/x", {long_name, NodeId(1), 1}, 4096, 0}, "f")
          .ok());
  EXPECT_FALSE(CheckTierFileHeader(
                   full, TierExpectation{"/x", {long_name + "m", NodeId(1), 1}, 4096, 0}, "f")
                   .ok());
}

TEST(ObjectChecksumTest, BoundToTheKey) {
  std::vector<std::byte> bytes(10000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7);
  const uint64_t a = ObjectChecksum(Key(1), bytes);
  EXPECT_EQ(a, ObjectChecksum(Key(1), bytes));
  // The same bytes under another block hash or another model's fingerprint: another checksum.
  EXPECT_NE(a, ObjectChecksum(Key(2), bytes));
  EXPECT_NE(a, ObjectChecksum(Key(1, /*model=*/8), bytes));
  // The bytes still count: one bit flipped changes it.
  bytes[5000] ^= std::byte{1};
  EXPECT_NE(a, ObjectChecksum(Key(1), bytes));
  // It is the seeded XXH3 of the bytes (a fused copy+checksum can compute it in one pass).
  EXPECT_EQ(ObjectChecksum(Key(1), bytes), kv::BlockChecksum(bytes, ObjectKeySeed(Key(1))));
  EXPECT_NE(ObjectChecksum(Key(1), bytes), kv::BlockChecksum(bytes));
}

}  // namespace
}  // namespace dualpath::store
