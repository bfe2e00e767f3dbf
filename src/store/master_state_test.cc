// MasterState unit tests: every timeout runs on a ManualClock and is enforced by Tick(); each test
// ends with CheckConsistency (space, LRU lists and pins agree with the objects).
#include "dualpath/store/master_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "store/test_util.h"

namespace dualpath::store {
namespace {

using testing::MakeKey;

constexpr uint64_t kBlock = 4096;  // = MasterConfig::alignment below: sizes in whole blocks
constexpr Nanos kPutTimeout = 30 * kNanosPerSecond;
constexpr Nanos kPinTtl = 10 * kNanosPerSecond;

class MasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterConfig config;
    config.put_timeout = kPutTimeout;
    config.pin_ttl = kPinTtl;
    config.alignment = kBlock;
    auto m = MasterState::Create(config, clock_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    m_ = std::move(m).value();
  }
  void TearDown() override {
    const Status s = m_->CheckConsistency();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  // A node with `blocks` blocks of DRAM; watermarks as fractions (1.0/1.0: never evicts by
  // watermark).
  void AddNode(uint32_t id, uint64_t blocks, double high = 1.0, double low = 1.0) {
    NodeSpec spec;
    spec.id = NodeId(id);
    spec.dram = TierSpec{blocks * kBlock, high, low};
    const Status s = m_->AddNode(spec);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Reserve + commit; returns the locations.
  std::vector<Replica> Put(uint64_t i, int replicas = 1, std::optional<uint32_t> preferred = {},
                           uint64_t size = kBlock) {
    PutOptions opt;
    opt.replicas = replicas;
    if (preferred) opt.preferred_node = NodeId(*preferred);
    auto t = m_->PutStart(MakeKey(i), size, opt);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return {};
    const Status s = m_->PutCommit(t->id, 1000 + i);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return t->locations;
  }

  bool Visible(uint64_t i) {
    const ObjectKey k = MakeKey(i);
    return m_->Exists({&k, 1}).found[0] == 1;
  }

  // Get + immediate Unpin: a use for LRU that leaves nothing pinned.
  void Touch(uint64_t i) {
    const ObjectKey k = MakeKey(i);
    GetResult g = m_->Get({&k, 1});
    ASSERT_TRUE(g.pin.has_value());
    ASSERT_TRUE(m_->Unpin(*g.pin).ok());
  }

  uint64_t Used(uint32_t node) { return m_->Usage(NodeId(node), Tier::kDram)->used; }

  ManualClock clock_{1'000'000};
  std::unique_ptr<MasterState> m_;
};

TEST_F(MasterTest, ReservedIsInvisibleUntilCommit) {
  AddNode(1, 8);
  const ObjectKey k = MakeKey(1);
  auto t = m_->PutStart(k, 5000, PutOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->locations.size(), 1u);
  EXPECT_EQ(t->locations[0].node, NodeId(1));
  EXPECT_EQ(t->locations[0].size, 5000u);
  EXPECT_EQ(t->deadline, clock_.Now() + kPutTimeout);
  EXPECT_EQ(Used(1), 2 * kBlock);  // 5000 bytes take two aligned blocks

  // Reserved: not visible to Exists or Get, and Get pins nothing.
  EXPECT_FALSE(Visible(1));
  GetResult g = m_->Get({&k, 1});
  EXPECT_FALSE(g.objects[0].found);
  EXPECT_FALSE(g.pin.has_value());
  EXPECT_EQ(m_->Stats().pending_puts, 1u);
  EXPECT_EQ(m_->Stats().objects, 0u);

  ASSERT_TRUE(m_->PutCommit(t->id, 0xC0FFEE).ok());
  EXPECT_TRUE(Visible(1));
  g = m_->Get({&k, 1});
  ASSERT_TRUE(g.objects[0].found);
  EXPECT_EQ(g.objects[0].size, 5000u);
  EXPECT_EQ(g.objects[0].checksum, 0xC0FFEEu);
  ASSERT_EQ(g.objects[0].replicas.size(), 1u);
  EXPECT_EQ(g.objects[0].replicas[0].offset, t->locations[0].offset);
  EXPECT_EQ(g.objects[0].replicas[0].checksum, 0xC0FFEEu);
  ASSERT_TRUE(g.pin.has_value());
  EXPECT_EQ(g.pin_expires_at, clock_.Now() + kPinTtl);
  EXPECT_TRUE(m_->Unpin(*g.pin).ok());
  // A committed put is no longer in progress.
  EXPECT_EQ(m_->PutCommit(t->id, 1).code(), Code::kStoreUnknownPut);
}

TEST_F(MasterTest, SecondPutOfAKeyIsAnsweredClearly) {
  AddNode(1, 8);
  const ObjectKey k = MakeKey(7);
  auto t = m_->PutStart(k, kBlock, PutOptions{});
  ASSERT_TRUE(t.ok());
  auto again = m_->PutStart(k, kBlock, PutOptions{});
  EXPECT_EQ(again.status().code(), Code::kStorePutPending) << again.status().ToString();
  ASSERT_TRUE(m_->PutCommit(t->id, 1).ok());
  again = m_->PutStart(k, kBlock, PutOptions{});
  EXPECT_EQ(again.status().code(), Code::kStoreObjectExists) << again.status().ToString();
  EXPECT_NE(again.status().message().find(k.ShortString()), std::string::npos);
  EXPECT_EQ(Used(1), kBlock);  // the refused puts reserved nothing
  // The same block hash under another model is another object.
  ObjectKey other = k;
  other.model_fingerprint++;
  EXPECT_TRUE(m_->PutStart(other, kBlock, PutOptions{}).ok());
}

TEST_F(MasterTest, AbortReturnsSpaceAndNeverShows) {
  AddNode(1, 4);
  auto t = m_->PutStart(MakeKey(1), 3 * kBlock, PutOptions{});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Used(1), 3 * kBlock);
  ASSERT_TRUE(m_->PutAbort(t->id).ok());
  EXPECT_EQ(Used(1), 0u);
  EXPECT_FALSE(Visible(1));
  EXPECT_EQ(m_->PutCommit(t->id, 1).code(), Code::kStoreUnknownPut);
  EXPECT_EQ(m_->PutAbort(t->id).code(), Code::kStoreUnknownPut);
  // The space is usable again, and the key can be put anew.
  auto t2 = m_->PutStart(MakeKey(1), 4 * kBlock, PutOptions{});
  ASSERT_TRUE(t2.ok()) << t2.status().ToString();
}

TEST_F(MasterTest, UncommittedPutIsReclaimedAtItsTimeout) {
  AddNode(1, 4);
  auto t = m_->PutStart(MakeKey(1), kBlock, PutOptions{});
  ASSERT_TRUE(t.ok());
  clock_.Advance(kPutTimeout - 1);
  EXPECT_EQ(m_->Tick().expired_puts, 0u);
  EXPECT_EQ(Used(1), kBlock);
  clock_.Advance(1);
  EXPECT_EQ(m_->Tick().expired_puts, 1u);
  EXPECT_EQ(Used(1), 0u);
  EXPECT_FALSE(Visible(1));
  // The writer that comes back late is told its put is gone.
  EXPECT_EQ(m_->PutCommit(t->id, 1).code(), Code::kStoreUnknownPut);
  EXPECT_EQ(m_->Stats().expired_puts, 1u);
}

TEST_F(MasterTest, ExistsCountsTheHitPrefix) {
  AddNode(1, 16);
  Put(0);
  Put(1);
  Put(3);
  ASSERT_TRUE(m_->PutStart(MakeKey(4), kBlock, PutOptions{}).ok());  // pending: not a hit
  std::vector<ObjectKey> keys{MakeKey(0), MakeKey(1), MakeKey(2), MakeKey(3), MakeKey(4)};
  ExistsResult r = m_->Exists(keys);
  EXPECT_EQ(r.prefix_hits, 2u);
  EXPECT_EQ(r.found, (std::vector<uint8_t>{1, 1, 0, 1, 0}));
  EXPECT_EQ(m_->Exists({}).prefix_hits, 0u);
  // Exists pins nothing.
  EXPECT_EQ(m_->Stats().pins, 0u);
}

// Exists answers a batch through a prefetch pipeline (the table's candidate for a key, confirmed
// against its record; master_state.cc): its answers must be exactly the per-key truth, also where
// two keys share the table hash and tag (same first 8 bytes and model: the first candidate is the
// other key's record), for keys of a second or unknown model, pending keys, and batches shorter
// and longer than the pipeline's depth.
TEST_F(MasterTest, ExistsBatchAnswersEveryKeyThroughCollisionsAndModels) {
  AddNode(1, 4096);
  constexpr uint64_t kOther = 0xBEEF;
  auto twin = [](uint64_t i) {  // the same table hash and tag as MakeKey(i), another key
    ObjectKey k = MakeKey(i);
    k.hash.bytes[31] ^= 0x5A;
    return k;
  };
  std::vector<ObjectKey> keys;
  std::vector<uint8_t> want;
  auto commit = [&](const ObjectKey& k) {
    auto t = m_->PutStart(k, kBlock, PutOptions{});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(m_->PutCommit(t->id, 7).ok());
  };
  for (uint64_t i = 0; i < 120; ++i) {
    switch (i % 6) {
      case 0:  // committed
        commit(MakeKey(i));
        break;
      case 1:  // its twin committed, the key itself absent: the candidate is the twin's record
        commit(twin(i));
        break;
      case 2:  // both committed, the key first: the twin's candidate is the key's record
        commit(MakeKey(i));
        commit(twin(i));
        break;
      case 3:  // pending: not a hit
        ASSERT_TRUE(m_->PutStart(MakeKey(i), kBlock, PutOptions{}).ok());
        break;
      case 4:  // committed under another model only
        commit(MakeKey(i, kOther));
        break;
      default:  // absent
        break;
    }
    keys.push_back(MakeKey(i));
    want.push_back(i % 6 == 0 || i % 6 == 2);
    keys.push_back(twin(i));
    want.push_back(i % 6 == 1 || i % 6 == 2);
    keys.push_back(MakeKey(i, kOther));
    want.push_back(i % 6 == 4);
    keys.push_back(MakeKey(i, 0xDEAD));  // a model the master has never seen
    want.push_back(0);
  }
  // Every length from 1 to past the pipeline's depth, from every offset class, and the whole.
  for (size_t len : {size_t{1}, size_t{2}, size_t{7}, size_t{8}, size_t{9}, size_t{16}, size_t{17},
                     size_t{33}, keys.size()}) {
    for (size_t first = 0; first + len <= keys.size(); first += std::max<size_t>(len, 5)) {
      const std::span<const ObjectKey> part(keys.data() + first, len);
      ExistsResult r = m_->Exists(part);
      const std::vector<uint8_t> expect(want.begin() + first, want.begin() + first + len);
      ASSERT_EQ(r.found, expect) << "batch of " << len << " from " << first;
      size_t prefix = 0;
      while (prefix < len && expect[prefix]) ++prefix;
      ASSERT_EQ(r.prefix_hits, prefix) << "batch of " << len << " from " << first;
    }
  }
}

TEST_F(MasterTest, WatermarkEvictionIsLeastRecentlyUsedFirst) {
  // 10 blocks; above 8 evict down to 5.
  AddNode(1, 10, 0.8, 0.5);
  for (uint64_t i = 0; i < 8; ++i) Put(i);
  EXPECT_EQ(Used(1), 8 * kBlock);  // at the high watermark, not above: nothing evicted
  Touch(0);
  Touch(3);  // recency now, oldest first: 1 2 4 5 6 7 0 3
  Put(8);    // 9 blocks > 8: evict 1 2 4 5 -> 5 blocks
  EXPECT_EQ(Used(1), 5 * kBlock);
  std::vector<uint64_t> left;
  for (uint64_t i = 0; i <= 8; ++i) {
    if (Visible(i)) left.push_back(i);
  }
  EXPECT_EQ(left, (std::vector<uint64_t>{0, 3, 6, 7, 8}));
  EXPECT_EQ(m_->Stats().evicted_replicas, 4u);
  EXPECT_EQ(m_->Stats().objects, 5u);
}

TEST_F(MasterTest, PinsBlockEvictionUntilUnpinnedOrExpired) {
  // 4 blocks; above 3 evict down to 1.
  AddNode(1, 4, 0.75, 0.25);
  Put(0);
  const ObjectKey k0 = MakeKey(0);
  GetResult pinned = m_->Get({&k0, 1});  // 0 is pinned...
  ASSERT_TRUE(pinned.pin.has_value());
  Put(1);
  Touch(1);
  Touch(0);  // ...and, after this, the most recent; make it the least recent again:
  Touch(1);  // order: 0 1
  Put(2);    // 3 blocks: at the high watermark, nothing evicted
  // The reservation makes 4 > 3: evict towards 1 block. 0 is the oldest but pinned, so 1 and 2
  // go; the reservation for 3 is not evictable, so 2 blocks remain (0 and 3).
  Put(3);
  EXPECT_TRUE(Visible(0));
  EXPECT_FALSE(Visible(1));
  EXPECT_FALSE(Visible(2));
  EXPECT_TRUE(Visible(3));
  EXPECT_EQ(Used(1), 2 * kBlock);

  // The pin lapses at its ttl: Tick releases it, and 0 is evictable again.
  clock_.Advance(kPinTtl);
  TickStats ts = m_->Tick();
  EXPECT_EQ(ts.expired_pins, 1u);
  EXPECT_EQ(m_->Unpin(*pinned.pin).code(), Code::kStoreUnknownPin);
  EXPECT_EQ(m_->Stats().pins, 0u);
  Put(4);
  Put(5);  // 4 > 3: 0 (the oldest, unpinned now), 3 and 4 go
  EXPECT_FALSE(Visible(0));
  EXPECT_FALSE(Visible(3));
  EXPECT_FALSE(Visible(4));
  EXPECT_TRUE(Visible(5));
  EXPECT_EQ(Used(1), kBlock);
}

TEST_F(MasterTest, EvictionWaitsForPinsAndTickFinishesIt) {
  AddNode(1, 4, 0.5, 0.5);  // above 2 blocks evict down to 2
  Put(0);
  Put(1);
  std::vector<ObjectKey> keys{MakeKey(0), MakeKey(1)};
  GetResult g = m_->Get(keys);
  ASSERT_TRUE(g.pin.has_value());
  // A put while everything is pinned: it is placed (free space exists), and then it is the only
  // unpinned object, so the watermark evicts it right after its commit.
  Put(2);
  EXPECT_FALSE(Visible(2));
  EXPECT_EQ(Used(1), 2 * kBlock);
  // A reservation pushes usage above high; nothing committed is evictable: Tick evicts nothing.
  auto t = m_->PutStart(MakeKey(3), kBlock, PutOptions{});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(m_->Tick().evicted_replicas, 0u);
  EXPECT_TRUE(Visible(0));
  EXPECT_TRUE(Visible(1));
  // Unpinning makes 0 and 1 evictable: the next Tick evicts the least recent (0).
  ASSERT_TRUE(m_->Unpin(*g.pin).ok());
  EXPECT_EQ(m_->Tick().evicted_replicas, 1u);
  EXPECT_FALSE(Visible(0));
  EXPECT_TRUE(Visible(1));
  ASSERT_TRUE(m_->PutAbort(t->id).ok());
}

TEST_F(MasterTest, RenewPinExtendsTheLease) {
  AddNode(1, 4);
  Put(0);
  const ObjectKey k = MakeKey(0);
  GetResult g = m_->Get({&k, 1});
  ASSERT_TRUE(g.pin.has_value());
  clock_.Advance(kPinTtl - 1);
  auto renewed = m_->RenewPin(*g.pin);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(*renewed, clock_.Now() + kPinTtl);
  clock_.Advance(kPinTtl - 1);
  EXPECT_EQ(m_->Tick().expired_pins, 0u);
  clock_.Advance(1);
  EXPECT_EQ(m_->Tick().expired_pins, 1u);
  EXPECT_EQ(m_->RenewPin(*g.pin).status().code(), Code::kStoreUnknownPin);
}

TEST_F(MasterTest, PlacementIsDistinctNodesPreferredFirstThenMostFree) {
  AddNode(1, 100);
  AddNode(2, 40);
  AddNode(3, 200);
  AddNode(4, 80);
  std::vector<Replica> loc = Put(0, 3, /*preferred=*/2);
  ASSERT_EQ(loc.size(), 3u);
  EXPECT_EQ(loc[0].node, NodeId(2));
  EXPECT_EQ(loc[1].node, NodeId(3));
  EXPECT_EQ(loc[2].node, NodeId(1));
  // Without a preference: most free first (3: 199, 1: 99, 4: 80, 2: 39 blocks free).
  loc = Put(1, 2);
  ASSERT_EQ(loc.size(), 2u);
  EXPECT_EQ(loc[0].node, NodeId(3));
  EXPECT_EQ(loc[1].node, NodeId(1));
  // A preferred node that is not live is only a hint: placement goes on without it.
  loc = Put(2, 1, /*preferred=*/99);
  ASSERT_EQ(loc.size(), 1u);
  EXPECT_EQ(loc[0].node, NodeId(3));
  // Never two replicas on one node, whatever the sizes: 3 replicas on many puts.
  for (uint64_t i = 10; i < 20; ++i) {
    loc = Put(i, 3);
    std::set<NodeId> nodes;
    for (const Replica& r : loc) nodes.insert(r.node);
    EXPECT_EQ(nodes.size(), 3u) << "put " << i;
  }
  const ObjectKey k = MakeKey(0);
  GetResult g = m_->Get({&k, 1});
  ASSERT_TRUE(g.objects[0].found);
  EXPECT_EQ(g.objects[0].replicas.size(), 3u);
  ASSERT_TRUE(m_->Unpin(*g.pin).ok());
}

TEST_F(MasterTest, PutSpillsToAFreeNodeBeforeEvicting) {
  AddNode(1, 2);
  AddNode(2, 2);
  Put(0, 1, 1);
  Put(1, 1, 1);  // node 1 full
  // Preferred node 1 is full: the put goes to node 2, which has room, and evicts nothing.
  std::vector<Replica> loc = Put(2, 1, 1);
  ASSERT_EQ(loc.size(), 1u);
  EXPECT_EQ(loc[0].node, NodeId(2));
  EXPECT_TRUE(Visible(0));
  EXPECT_TRUE(Visible(1));
  Put(3, 1, 2);  // node 2 full too
  // Now nowhere has room: the put evicts the least recent unpinned object on its first choice.
  loc = Put(4, 1, 1);
  ASSERT_EQ(loc.size(), 1u);
  EXPECT_EQ(loc[0].node, NodeId(1));
  EXPECT_FALSE(Visible(0));
  EXPECT_TRUE(Visible(1));
  // Everything pinned: no space and nothing evictable is a clear kStoreNoSpace.
  std::vector<ObjectKey> all{MakeKey(1), MakeKey(2), MakeKey(3), MakeKey(4)};
  GetResult g = m_->Get(all);
  auto t = m_->PutStart(MakeKey(5), kBlock, PutOptions{});
  EXPECT_EQ(t.status().code(), Code::kStoreNoSpace) << t.status().ToString();
  ASSERT_TRUE(m_->Unpin(*g.pin).ok());
}

TEST_F(MasterTest, DeadNodeReplicasAreDroppedAndNeverHandedOut) {
  AddNode(1, 16);
  AddNode(2, 16);
  AddNode(3, 16);
  Put(0, 2, 1);  // on 1 and another
  Put(1, 1, 1);  // only on 1
  Put(2, 1, 2);  // only on 2
  const ObjectKey k1 = MakeKey(1);
  GetResult held = m_->Get({&k1, 1});  // a reader holds 1 while its node dies
  ASSERT_TRUE(held.pin.has_value());
  auto pending =
      m_->PutStart(MakeKey(3), kBlock, PutOptions{.replicas = 1, .preferred_node = NodeId(1)});
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->locations[0].node, NodeId(1));
  auto pending2 =
      m_->PutStart(MakeKey(4), kBlock, PutOptions{.replicas = 2, .preferred_node = NodeId(1)});
  ASSERT_TRUE(pending2.ok());

  ASSERT_TRUE(m_->RemoveNode(NodeId(1)).ok());
  EXPECT_EQ(m_->LiveNodes(), (std::vector<NodeId>{NodeId(2), NodeId(3)}));
  // 0 keeps its other replica; 1 had only node 1 and is gone; 2 is untouched.
  std::vector<ObjectKey> keys{MakeKey(0), MakeKey(1), MakeKey(2)};
  GetResult g = m_->Get(keys);
  ASSERT_TRUE(g.objects[0].found);
  ASSERT_EQ(g.objects[0].replicas.size(), 1u);
  EXPECT_NE(g.objects[0].replicas[0].node, NodeId(1));
  EXPECT_FALSE(g.objects[1].found);
  EXPECT_TRUE(g.objects[2].found);
  ASSERT_TRUE(m_->Unpin(*g.pin).ok());
  // The put that had only node 1 is gone; the one with a second node commits on that node alone.
  EXPECT_EQ(m_->PutCommit(pending->id, 1).code(), Code::kStoreUnknownPut);
  ASSERT_TRUE(m_->PutCommit(pending2->id, 1).ok());
  const ObjectKey k4 = MakeKey(4);
  g = m_->Get({&k4, 1});
  ASSERT_EQ(g.objects[0].replicas.size(), 1u);
  EXPECT_NE(g.objects[0].replicas[0].node, NodeId(1));
  ASSERT_TRUE(m_->Unpin(*g.pin).ok());
  // The reader's pin on the orphaned object still unpins cleanly.
  EXPECT_EQ(m_->Stats().hidden_pinned, 1u);
  EXPECT_TRUE(m_->Unpin(*held.pin).ok());
  EXPECT_EQ(m_->Stats().hidden_pinned, 0u);
  // Node 1 is never handed out, even when preferred.
  for (uint64_t i = 10; i < 20; ++i) {
    for (const Replica& r : Put(i, 2, 1)) EXPECT_NE(r.node, NodeId(1));
  }
  EXPECT_EQ(m_->Usage(NodeId(1), Tier::kDram).status().code(), Code::kStoreUnknownNode);
  EXPECT_EQ(m_->RemoveNode(NodeId(1)).code(), Code::kStoreUnknownNode);
  // Three replicas need three live nodes.
  auto t = m_->PutStart(MakeKey(30), kBlock, PutOptions{.replicas = 3});
  EXPECT_EQ(t.status().code(), Code::kStoreNotEnoughNodes) << t.status().ToString();
  // A restarted node comes back empty.
  AddNode(1, 16);
  EXPECT_EQ(Used(1), 0u);
  EXPECT_TRUE(m_->PutStart(MakeKey(30), kBlock, PutOptions{.replicas = 3}).ok());
}

TEST_F(MasterTest, RemoveHidesAtOnceAndFreesAtTheLastUnpin) {
  AddNode(1, 8);
  Put(0);
  Put(1);
  std::vector<ObjectKey> both{MakeKey(0), MakeKey(1)};
  const ObjectKey k1 = MakeKey(1);
  GetResult g = m_->Get({&k1, 1});
  ASSERT_TRUE(g.pin.has_value());
  EXPECT_EQ(m_->Remove(both), 2u);
  EXPECT_FALSE(Visible(0));
  EXPECT_FALSE(Visible(1));
  EXPECT_EQ(Used(1), kBlock);  // 0's space is back; 1's is held for its reader
  // The key can be put again while the old copy is still being read: a different location.
  std::vector<Replica> loc = Put(1);
  ASSERT_EQ(loc.size(), 1u);
  EXPECT_NE(loc[0].offset, g.objects[0].replicas[0].offset);
  EXPECT_EQ(Used(1), 2 * kBlock);
  clock_.Advance(kPinTtl);
  EXPECT_EQ(m_->Tick().expired_pins, 1u);  // the expired pin frees the removed copy
  EXPECT_EQ(Used(1), kBlock);
  EXPECT_TRUE(Visible(1));
  EXPECT_EQ(m_->Remove(both), 1u);
  EXPECT_EQ(m_->Remove(both), 0u);
  EXPECT_EQ(Used(1), 0u);
}

TEST_F(MasterTest, StandbyRebuildsFromNodeReports) {
  AddNode(1, 16);
  AddNode(2, 16);
  AddNode(3, 16);
  for (uint64_t i = 0; i < 12; ++i)
    Put(i, 1 + static_cast<int>(i % 3), static_cast<uint32_t>(1 + i % 3));
  std::vector<ObjectKey> keys;
  for (uint64_t i = 0; i < 12; ++i) keys.push_back(MakeKey(i));
  GetResult before = m_->Get(keys);
  ASSERT_TRUE(m_->Unpin(*before.pin).ok());

  // What each node would report: the replicas it holds.
  std::map<uint32_t, std::vector<ReportedReplica>> reports;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(before.objects[i].found);
    for (const Replica& r : before.objects[i].replicas) {
      reports[r.node.value()].push_back(
          ReportedReplica{keys[i], r.tier, r.offset, r.size, r.checksum});
    }
  }
  MasterConfig config;
  config.alignment = kBlock;
  auto standby = MasterState::Create(config, clock_);
  ASSERT_TRUE(standby.ok());
  MasterState& s = **standby;
  EXPECT_EQ(s.RebuildFromReports(NodeId(1), reports[1]).status().code(), Code::kStoreUnknownNode);
  for (uint32_t n = 1; n <= 3; ++n) {
    NodeSpec spec;
    spec.id = NodeId(n);
    spec.dram = TierSpec{16 * kBlock, 1.0, 1.0};
    ASSERT_TRUE(s.AddNode(spec).ok());
    auto out = s.RebuildFromReports(NodeId(n), reports[n]);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->accepted, reports[n].size());
    EXPECT_TRUE(out->rejected.empty());
    EXPECT_EQ(s.Usage(NodeId(n), Tier::kDram)->used, Used(n));
  }
  GetResult after = s.Get(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(after.objects[i].found) << i;
    EXPECT_EQ(after.objects[i].size, before.objects[i].size);
    EXPECT_EQ(after.objects[i].checksum, before.objects[i].checksum);
    auto sorted = [](std::vector<Replica> v) {
      std::sort(v.begin(), v.end(),
                [](const Replica& a, const Replica& b) { return a.node < b.node; });
      return v;
    };
    EXPECT_EQ(sorted(after.objects[i].replicas), sorted(before.objects[i].replicas)) << i;
  }
  ASSERT_TRUE(s.Unpin(*after.pin).ok());

  // Bad reports are rejected one by one, naming why; the good one beside them is taken.
  const ReportedReplica& good = reports[1][0];
  ReportedReplica overlap{MakeKey(100), Tier::kDram, good.offset, kBlock, 5};
  ReportedReplica conflict = good;
  conflict.checksum ^= 1;
  ReportedReplica zero{MakeKey(101), Tier::kDram, 15 * kBlock, 0, 5};
  ReportedReplica no_tier{MakeKey(102), Tier::kSsd, 0, kBlock, 5};
  ReportedReplica past_end{MakeKey(103), Tier::kDram, 16 * kBlock, kBlock, 5};
  ReportedReplica fine{MakeKey(104), Tier::kDram, 15 * kBlock, kBlock, 5};
  std::vector<ReportedReplica> mixed{overlap, conflict, zero, no_tier, past_end, fine};
  auto out = s.RebuildFromReports(NodeId(1), mixed);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->accepted, 1u);
  ASSERT_EQ(out->rejected.size(), 5u);
  EXPECT_EQ(out->rejected[0].second.code(), Code::kStoreReportConflict);
  EXPECT_NE(out->rejected[0].second.message().find("overlap"), std::string::npos);
  EXPECT_EQ(out->rejected[1].second.code(), Code::kStoreReportConflict);
  EXPECT_EQ(out->rejected[2].second.code(), Code::kInvalidArgument);
  EXPECT_EQ(out->rejected[3].second.code(), Code::kInvalidArgument);
  EXPECT_NE(out->rejected[3].second.message().find("ssd"), std::string::npos);
  EXPECT_EQ(out->rejected[4].second.code(), Code::kStoreReportConflict);
  EXPECT_EQ(s.Exists({&fine.key, 1}).found[0], 1);
  EXPECT_EQ(s.Exists({&overlap.key, 1}).found[0], 0);
  const Status c = s.CheckConsistency();
  EXPECT_TRUE(c.ok()) << c.ToString();
}

TEST_F(MasterTest, HeldEvictionFreesNothingUntilItsTime) {
  // A new leader does not know the old leader's pins: it holds eviction for one pin ttl.
  AddNode(1, 2, 0.5, 0.5);
  m_->HoldEviction(clock_.Now() + kPinTtl);
  Put(0);
  Put(1);  // 2 > 1 block: would evict 0, but eviction is held
  EXPECT_TRUE(Visible(0));
  EXPECT_TRUE(Visible(1));
  auto t = m_->PutStart(MakeKey(2), kBlock, PutOptions{});
  EXPECT_EQ(t.status().code(), Code::kStoreNoSpace) << t.status().ToString();
  clock_.Advance(kPinTtl - 1);
  EXPECT_EQ(m_->Tick().evicted_replicas, 0u);
  clock_.Advance(1);
  EXPECT_EQ(m_->Tick().evicted_replicas, 1u);
  EXPECT_FALSE(Visible(0));
  EXPECT_TRUE(Visible(1));
}

TEST_F(MasterTest, BadInputIsRejectedNamingWhat) {
  AddNode(1, 4);
  AddNode(2, 8);
  auto expect = [](const Status& s, Code code, std::string_view text) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(text), std::string::npos) << s.ToString();
  };
  const ObjectKey k = MakeKey(1);
  expect(m_->PutStart(k, kBlock, PutOptions{.replicas = 0}).status(), Code::kInvalidArgument,
         "replicas 0");
  expect(m_->PutStart(k, kBlock, PutOptions{.replicas = 4}).status(), Code::kInvalidArgument,
         "replicas 4");
  expect(m_->PutStart(k, 0, PutOptions{}).status(), Code::kInvalidArgument, "size 0");
  expect(m_->PutStart(k, 8 * kBlock + 1, PutOptions{}).status(), Code::kInvalidArgument,
         "exceeds the largest dram tier");
  expect(m_->PutStart(k, kBlock, PutOptions{.tier = static_cast<Tier>(7)}).status(),
         Code::kInvalidArgument, "tier 7");
  expect(m_->PutStart(k, kBlock, PutOptions{.tier = Tier::kSsd}).status(),
         Code::kStoreNotEnoughNodes, "ssd");
  expect(m_->PutStart(k, kBlock, PutOptions{.replicas = 3}).status(), Code::kStoreNotEnoughNodes,
         "only 2 live nodes");
  // Two replicas of 5 blocks: only node 2 is that large.
  expect(m_->PutStart(k, 5 * kBlock, PutOptions{.replicas = 2}).status(),
         Code::kStoreNotEnoughNodes, "at least");
  expect(m_->PutCommit(PutId(42), 0), Code::kStoreUnknownPut, "put 42");
  expect(m_->PutAbort(PutId(42)), Code::kStoreUnknownPut, "put 42");
  expect(m_->Unpin(PinId(9)), Code::kStoreUnknownPin, "pin 9");
  expect(m_->RemoveNode(NodeId(5)), Code::kStoreUnknownNode, "node 5");
  expect(m_->Usage(NodeId(5), Tier::kDram).status(), Code::kStoreUnknownNode, "node 5");
  expect(m_->RebuildFromReports(NodeId(5), {}).status(), Code::kStoreUnknownNode, "node 5");
  NodeSpec dup;
  dup.id = NodeId(1);
  dup.dram.capacity = kBlock;
  expect(m_->AddNode(dup), Code::kStoreNodeExists, "node 1");
  NodeSpec empty;
  empty.id = NodeId(6);
  empty.dram.capacity = kBlock - 1;  // rounds down to nothing
  expect(m_->AddNode(empty), Code::kInvalidArgument, "no tier");
  NodeSpec marks;
  marks.id = NodeId(6);
  marks.ssd = TierSpec{kBlock, 0.5, 0.9};
  expect(m_->AddNode(marks), Code::kInvalidArgument, "ssd: watermarks");
  EXPECT_EQ(m_->LiveNodes().size(), 2u);
  EXPECT_EQ(m_->Stats().pending_puts, 0u);

  MasterConfig bad;
  bad.alignment = 3000;
  expect(MasterState::Create(bad, clock_).status(), Code::kInvalidArgument, "alignment 3000");
  bad = MasterConfig{};
  bad.put_timeout = 0;
  expect(MasterState::Create(bad, clock_).status(), Code::kInvalidArgument, "put_timeout");
  bad = MasterConfig{};
  bad.pin_ttl = -1;
  expect(MasterState::Create(bad, clock_).status(), Code::kInvalidArgument, "pin_ttl");
}

}  // namespace
}  // namespace dualpath::store
