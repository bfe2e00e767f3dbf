// LeaderElection against a real etcd: one leader among candidates, observation of the leader,
// and the standby taking over when the leader resigns, dies (its lease expires) or loses its
// lease.
#include "dualpath/coord/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>

#include "coord/etcd_fixture_test.h"

namespace dualpath::coord {
namespace {

using LeaderElectionTest = EtcdFixture;

std::unique_ptr<LeaderElection> MakeCandidate(EtcdClient* client, const std::string& value,
                                              Nanos ttl,
                                              std::function<void(const Status&)> on_lost = {}) {
  auto e = LeaderElection::Create(client, ElectionOptions{"c1", ttl, std::move(on_lost)}, value);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(LeaderElectionOptionsTest, BadOptionsAreRefused) {
  EXPECT_EQ(LeaderElection::Create(nullptr, ElectionOptions{"", kNanosPerSecond, {}}, "v")
                .status()
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LeaderElection::Create(nullptr, ElectionOptions{"c", 0, {}}, "v").status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LeaderElection::LeaderKey("c1"), "/dualpath/c1/leader");
}

TEST_F(LeaderElectionTest, TwoCandidatesOneLeaderAndTheStandbyTakesOverOnResign) {
  auto client_b = NewClient();
  auto a = MakeCandidate(client_.get(), "master-a", 5 * kNanosPerSecond);
  auto b = MakeCandidate(client_b.get(), "master-b", 5 * kNanosPerSecond);
  ASSERT_TRUE(a && b);

  Inbox<std::optional<std::string>> leaders;
  auto observer = MakeCandidate(client_.get(), "observer", 5 * kNanosPerSecond);
  auto watch = observer->Observe([&](const std::optional<std::string>& v) { leaders.Push(v); });
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();

  // Both campaign at once; exactly one wins, the other waits.
  Status status_a, status_b;
  std::atomic<int> done{0};
  std::thread ta([&] {
    status_a = a->Campaign(kWaitLimit);
    done.fetch_add(1);
  });
  std::thread tb([&] {
    status_b = b->Campaign(kWaitLimit);
    done.fetch_add(1);
  });
  // Whatever fails below, the campaigns end (Resign returns a waiting Campaign) and the threads
  // are joined before the candidates go.
  struct Finally {
    std::function<void()> f;
    ~Finally() { f(); }
  } finally{[&] {
    (void)a->Resign();
    (void)b->Resign();
    if (ta.joinable()) ta.join();
    if (tb.joinable()) tb.join();
  }};
  ASSERT_TRUE(WaitUntil([&] { return a->IsLeader() || b->IsLeader(); }));
  EXPECT_NE(a->IsLeader(), b->IsLeader()) << "two leaders";
  LeaderElection* leader = a->IsLeader() ? a.get() : b.get();
  LeaderElection* standby = a->IsLeader() ? b.get() : a.get();
  const std::string leader_value = a->IsLeader() ? "master-a" : "master-b";
  const std::string standby_value = a->IsLeader() ? "master-b" : "master-a";
  auto current = observer->Leader();
  ASSERT_TRUE(current.ok() && current.value().has_value());
  EXPECT_EQ(current.value()->value, leader_value);
  EXPECT_EQ(done.load(), 1);  // the standby is still campaigning
  EXPECT_FALSE(standby->IsLeader());

  ASSERT_TRUE(leader->Resign().ok());
  EXPECT_FALSE(leader->IsLeader());
  ta.join();
  tb.join();
  EXPECT_TRUE(status_a.ok()) << status_a.ToString();
  EXPECT_TRUE(status_b.ok()) << status_b.ToString();
  EXPECT_TRUE(standby->IsLeader());
  EXPECT_EQ(observer->Leader().value()->value, standby_value);

  // The observer saw: nobody, the first leader, nobody (the resignation), the standby.
  ASSERT_TRUE(leaders.WaitFor([&](const auto& vs) {
    return !vs.empty() && vs.back() == std::optional<std::string>(standby_value);
  }));
  auto seen = leaders.Items();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], std::nullopt);
  EXPECT_EQ(seen[1], std::optional<std::string>(leader_value));
  EXPECT_EQ(seen[2], std::nullopt);
}

TEST_F(LeaderElectionTest, CampaignTimesOutWhileAnotherLeads) {
  auto a = MakeCandidate(client_.get(), "master-a", 5 * kNanosPerSecond);
  auto b = MakeCandidate(client_.get(), "master-b", 5 * kNanosPerSecond);
  ASSERT_TRUE(a->Campaign(kWaitLimit).ok());
  ASSERT_TRUE(a->Campaign(kWaitLimit).ok());  // already leading: at once
  Status s = b->Campaign(kNanosPerSecond / 5);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("master-a"), std::string::npos) << s.ToString();
  EXPECT_FALSE(b->IsLeader());
  EXPECT_TRUE(a->IsLeader());

  // A campaign waiting in another thread returns when its candidate resigns.
  Status waiting;
  std::thread tb([&] { waiting = b->Campaign(kWaitLimit); });
  EXPECT_TRUE(WaitUntil([&] { return b->IsCampaigning(); }));  // EXPECT: the thread is joined
  ASSERT_TRUE(b->Resign().ok());
  tb.join();
  EXPECT_EQ(waiting.code(), Code::kCancelled) << waiting.ToString();
  EXPECT_FALSE(b->IsCampaigning());
  EXPECT_TRUE(a->IsLeader());
}

TEST_F(LeaderElectionTest, StandbyTakesOverWhenTheLeaderDies) {
  auto client_a = NewClient();
  auto client_b = NewClient();
  auto a = MakeCandidate(client_a.get(), "master-a", kNanosPerSecond);
  auto b = MakeCandidate(client_b.get(), "master-b", kNanosPerSecond);
  ASSERT_TRUE(a->Campaign(kWaitLimit).ok());
  const LeaseId dead_lease = client_->Get(LeaderElection::LeaderKey("c1")).value()->lease;

  Status status_b;
  std::thread tb([&] { status_b = b->Campaign(kWaitLimit); });
  a->Abandon();  // a "crashes": its lease is no longer kept alive
  EXPECT_FALSE(a->IsLeader());
  tb.join();
  ASSERT_TRUE(status_b.ok()) << status_b.ToString();
  EXPECT_TRUE(b->IsLeader());
  auto leader = client_->Get(LeaderElection::LeaderKey("c1"));
  ASSERT_TRUE(leader.ok() && leader.value().has_value());
  EXPECT_EQ(leader.value()->value, "master-b");
  // b won because a's lease expired, not because a resigned.
  EXPECT_EQ(client_->LeaseTimeToLive(dead_lease).status().code(), Code::kCoordLeaseLost);
}

TEST_F(LeaderElectionTest, ALostLeaseEndsLeadership) {
  Inbox<Status> lost;
  auto a = MakeCandidate(client_.get(), "master-a", 5 * kNanosPerSecond,
                         [&](const Status& s) { lost.Push(s); });
  ASSERT_TRUE(a->Campaign(kWaitLimit).ok());
  const LeaseId lease = client_->Get(LeaderElection::LeaderKey("c1")).value()->lease;
  ASSERT_TRUE(client_->LeaseRevoke(lease).ok());  // e.g. an operator, or an expiry
  ASSERT_TRUE(lost.WaitFor([](const auto& v) { return !v.empty(); }));
  EXPECT_EQ(lost.Items()[0].code(), Code::kCoordLeaseLost);
  EXPECT_FALSE(a->IsLeader());
  // It may campaign again (with a new lease) and lead again.
  ASSERT_TRUE(a->Campaign(kWaitLimit).ok());
  EXPECT_TRUE(a->IsLeader());
  EXPECT_NE(client_->Get(LeaderElection::LeaderKey("c1")).value()->lease, lease);
}

}  // namespace
}  // namespace dualpath::coord
