// Membership against a real etcd: registration, listing, joins and leaves, a registration whose
// lease expires, and re-registration on its own after the lease is revoked, after etcd restarts
// on its data, and after etcd comes back without its data; one live registration per name (a
// second one refused, a dead one's name taken once its lease ran out), a deleted key put back.
#include "dualpath/coord/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>

#include "coord/etcd_fixture_test.h"

namespace dualpath::coord {
namespace {

std::unique_ptr<Membership> MakeMembership(EtcdClient* client, Nanos ttl) {
  auto m = Membership::Create(client, MembershipOptions{"c1", ttl});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// A member with an etcd client of its own, as another process would have. The client outlives the
// membership (members are destroyed in reverse order of declaration).
struct OwnNode {
  std::unique_ptr<EtcdClient> client;
  std::unique_ptr<Membership> m;
  Membership* operator->() const { return m.get(); }
};

class MembershipTest : public EtcdFixture {
 protected:
  OwnNode NewNode(Nanos ttl) {
    OwnNode n;
    n.client = NewClient();
    n.m = MakeMembership(n.client.get(), ttl);
    return n;
  }

  // The registration of `name` as etcd holds it now, read through the fixture's client; empty
  // when there is none (a failed read fails the test). Not for WaitUntil loops across an etcd
  // restart, where a failed read is expected.
  std::optional<KeyValue> Stored(const std::string& name) {
    auto kv = client_->Get(Membership::NodeKey("c1", name));
    EXPECT_TRUE(kv.ok()) << kv.status().ToString();
    return kv.ok() ? kv.value() : std::nullopt;
  }
};

bool Has(const std::vector<NodeEvent>& events, NodeEvent::Kind kind, const std::string& name) {
  return std::any_of(events.begin(), events.end(),
                     [&](const NodeEvent& e) { return e.kind == kind && e.name == name; });
}

TEST(MembershipOptionsTest, BadNamesAndTtlsAreRefused) {
  EXPECT_EQ(Membership::Create(nullptr, MembershipOptions{"", kNanosPerSecond}).status().code(),
            Code::kInvalidArgument);
  auto slash = Membership::Create(nullptr, MembershipOptions{"a/b", kNanosPerSecond});
  EXPECT_EQ(slash.status().code(), Code::kInvalidArgument);
  EXPECT_NE(slash.status().message().find("cluster 'a/b'"), std::string::npos);
  EXPECT_EQ(
      Membership::Create(nullptr, MembershipOptions{"c", kNanosPerSecond / 2}).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(Membership::NodeKey("c1", "n1"), "/dualpath/c1/nodes/n1");
}

TEST_F(MembershipTest, RegisterListWatchDeregister) {
  auto a = MakeMembership(client_.get(), 5 * kNanosPerSecond);
  auto b = NewNode(5 * kNanosPerSecond);
  ASSERT_TRUE(a && b.m);
  Status s = a->Register("node-a", "10.0.0.1:7000", kWaitLimit);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(a->registered());
  EXPECT_EQ(a->registrations(), 1);
  EXPECT_EQ(a->Register("node-a", "x", kWaitLimit).code(), Code::kFailedPrecondition);
  EXPECT_EQ(b->Register("bad name", "x", kWaitLimit).code(), Code::kInvalidArgument);

  Inbox<NodeEvent> events;
  auto observer = MakeMembership(client_.get(), 5 * kNanosPerSecond);
  auto watch = observer->WatchNodes([&](const NodeEvent& e) { events.Push(e); });
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_EQ(watch.value().nodes.size(), 1u);
  EXPECT_EQ(watch.value().nodes[0].name, "node-a");
  EXPECT_EQ(watch.value().nodes[0].value, "10.0.0.1:7000");
  EXPECT_EQ(watch.value().nodes[0].lease, a->lease());

  ASSERT_TRUE(b->Register("node-b", "10.0.0.2:7000", kWaitLimit).ok());
  ASSERT_TRUE(
      events.WaitFor([](const auto& es) { return Has(es, NodeEvent::Kind::kJoined, "node-b"); }));
  auto nodes = observer->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes.value().size(), 2u);
  EXPECT_EQ(nodes.value()[1].name, "node-b");

  ASSERT_TRUE(b->Deregister().ok());
  EXPECT_FALSE(b->registered());
  ASSERT_TRUE(
      events.WaitFor([](const auto& es) { return Has(es, NodeEvent::Kind::kLeft, "node-b"); }));
  EXPECT_EQ(observer->ListNodes().value().size(), 1u);
  // The deregistered node's lease is gone too.
  EXPECT_FALSE(Has(events.Items(), NodeEvent::Kind::kLeft, "node-a"));
}

TEST_F(MembershipTest, AnExpiredLeaseRemovesTheRegistration) {
  auto node = NewNode(kNanosPerSecond);
  ASSERT_TRUE(node.m);
  ASSERT_TRUE(node->Register("short-lived", "v", kWaitLimit).ok());
  const LeaseId lease = node->lease();
  ASSERT_NE(lease, 0);

  Inbox<NodeEvent> events;
  auto observer = MakeMembership(client_.get(), kNanosPerSecond);
  auto watch = observer->WatchNodes([&](const NodeEvent& e) { events.Push(e); });
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_EQ(watch.value().nodes.size(), 1u);

  node->Abandon();  // the keep-alives stop, as if the process had died
  EXPECT_FALSE(node->registered());
  ASSERT_TRUE(events.WaitFor([](const auto& es) {
    return Has(es, NodeEvent::Kind::kLeft, "short-lived");
  })) << "the registration outlived its lease";
  EXPECT_TRUE(observer->ListNodes().value().empty());
  EXPECT_EQ(client_->LeaseTimeToLive(lease).status().code(), Code::kCoordLeaseLost);
}

TEST_F(MembershipTest, KeepAlivesHoldTheRegistrationPastItsTtl) {
  auto node = MakeMembership(client_.get(), kNanosPerSecond);
  ASSERT_TRUE(node->Register("steady", "v", kWaitLimit).ok());
  // Six answered keep-alives at ttl/3 span two TTLs: without them the key would be gone.
  ASSERT_TRUE(WaitUntil([&] { return node->keepalives() >= 6; }));
  auto kv = Stored("steady");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->lease, node->lease());
  EXPECT_EQ(node->registrations(), 1);
}

TEST_F(MembershipTest, ReRegistersWhenItsLeaseIsRevoked) {
  auto node = NewNode(2 * kNanosPerSecond);
  ASSERT_TRUE(node->Register("phoenix", "v1", kWaitLimit).ok());
  const LeaseId first = node->lease();

  Inbox<NodeEvent> events;
  auto observer = MakeMembership(client_.get(), 2 * kNanosPerSecond);
  auto watch = observer->WatchNodes([&](const NodeEvent& e) { events.Push(e); });
  ASSERT_TRUE(watch.ok());

  ASSERT_TRUE(client_->LeaseRevoke(first).ok());  // etcd drops the lease and the key
  ASSERT_TRUE(events.WaitFor([](const auto& es) {
    return Has(es, NodeEvent::Kind::kLeft, "phoenix") &&
           Has(es, NodeEvent::Kind::kJoined, "phoenix");
  })) << "the node did not register again";
  EXPECT_TRUE(WaitUntil([&] { return node->registrations() == 2 && node->registered(); }));
  EXPECT_NE(node->lease(), first);
  auto kv = Stored("phoenix");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->lease, node->lease());
  EXPECT_EQ(kv->value, "v1");
}

TEST_F(MembershipTest, StaysRegisteredAcrossAnEtcdRestartOnItsData) {
  auto node = NewNode(2 * kNanosPerSecond);
  ASSERT_TRUE(node->Register("survivor", "v", kWaitLimit).ok());
  ASSERT_TRUE(WaitUntil([&] { return node->keepalives() >= 1; }));

  RestartEtcd(/*wipe=*/false);
  // The node keeps its registration by itself: a keep-alive of its (current) lease is answered by
  // the restarted etcd and the key is there under that lease.
  const int64_t keepalives = node->keepalives();
  const int64_t registrations = node->registrations();
  ASSERT_TRUE(WaitUntil([&] {
    if (!node->registered()) return false;
    if (node->registrations() == registrations && node->keepalives() <= keepalives) return false;
    auto kv = client_->Get(Membership::NodeKey("c1", "survivor"));
    return kv.ok() && kv.value().has_value() && kv.value()->lease == node->lease();
  })) << "not registered after etcd's restart (etcd log: "
      << server_.log_path() << ")";
  EXPECT_TRUE(client_->LeaseTimeToLive(node->lease()).ok());
}

TEST_F(MembershipTest, ReRegistersAfterAnEtcdOutageLongerThanItsTtl) {
  auto node = NewNode(kNanosPerSecond);
  ASSERT_TRUE(node->Register("patient", "v", kWaitLimit).ok());
  const LeaseId first = node->lease();

  server_.Kill();
  // No keep-alive answered for a whole TTL: the node gives its lease up (etcd may have expired it).
  ASSERT_TRUE(WaitUntil([&] { return !node->registered(); }));
  Status started = server_.Start();  // the same data directory
  ASSERT_TRUE(started.ok()) << started.ToString();

  // etcd restored the old lease (with a fresh TTL), but nobody keeps it alive any more: the node
  // registered under a new one, and the old one's expiry leaves the key alone.
  ASSERT_TRUE(WaitUntil([&] {
    auto kv = client_->Get(Membership::NodeKey("c1", "patient"));
    return node->registered() && kv.ok() && kv.value().has_value() &&
           kv.value()->lease == node->lease();
  })) << "not registered again after the outage (etcd log: "
      << server_.log_path() << ")";
  EXPECT_EQ(node->registrations(), 2);
  EXPECT_NE(node->lease(), first);
  ASSERT_TRUE(WaitUntil(
      [&] { return client_->LeaseTimeToLive(first).status().code() == Code::kCoordLeaseLost; }));
  auto kv = Stored("patient");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->lease, node->lease());
}

TEST_F(MembershipTest, RegistersAgainWhenEtcdComesBackWithoutItsData) {
  auto node = NewNode(2 * kNanosPerSecond);
  ASSERT_TRUE(node->Register("amnesia", "v", kWaitLimit).ok());
  const LeaseId first = node->lease();
  Inbox<Status> watch_errors;
  auto observer = MakeMembership(client_.get(), 2 * kNanosPerSecond);
  auto watch =
      observer->WatchNodes([](const NodeEvent&) {}, [&](const Status& s) { watch_errors.Push(s); });
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();

  RestartEtcd(/*wipe=*/true);  // a fresh etcd: no lease, no key, revisions from 1 again
  ASSERT_TRUE(WaitUntil([&] {
    auto kv = client_->Get(Membership::NodeKey("c1", "amnesia"));
    return kv.ok() && kv.value().has_value() && kv.value()->lease == node->lease();
  })) << "not registered again on the fresh etcd (etcd log: "
      << server_.log_path() << ")";
  EXPECT_GE(node->registrations(), 2);
  EXPECT_NE(node->lease(), first);
  EXPECT_TRUE(client_->LeaseTimeToLive(node->lease()).ok());
  // A watcher cannot follow a history that is gone: it is told so, and would list and watch anew.
  ASSERT_TRUE(watch_errors.WaitFor([](const auto& v) { return !v.empty(); }));
  EXPECT_EQ(watch_errors.Items()[0].code(), Code::kCoordCompacted)
      << watch_errors.Items()[0].ToString();
}

// A name is held by one live registration: a second process registering it is refused and the
// key stays the first one's (issue 25 item 5: a second `store node` with a live node's id).
TEST_F(MembershipTest, ASecondRegistrationOfALiveNameIsRefused) {
  auto a = NewNode(2 * kNanosPerSecond);
  ASSERT_TRUE(a->Register("only-one", "first", kWaitLimit).ok());
  auto b = NewNode(2 * kNanosPerSecond);
  Status second = b->Register("only-one", "second", kWaitLimit);
  EXPECT_EQ(second.code(), Code::kAlreadyExists) << second.ToString();
  EXPECT_NE(second.message().find("held by a live registration"), std::string::npos)
      << second.ToString();
  EXPECT_FALSE(b->registered());
  EXPECT_EQ(b->registrations(), 0);
  auto kv = Stored("only-one");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, "first");
  EXPECT_EQ(kv->lease, a->lease());
  EXPECT_EQ(a->registrations(), 1);
  // The refused one holds nothing: it can register under a free name.
  EXPECT_TRUE(b->Register("another", "second", kWaitLimit).ok());
}

// A restarted process finds the key of its dead predecessor (same name, a lease nobody renews):
// it waits for etcd to expire that lease and then takes the name.
TEST_F(MembershipTest, ADeadHoldersNameIsTakenOnceItsLeaseRunsOut) {
  auto old = NewNode(kNanosPerSecond);
  ASSERT_TRUE(old->Register("reborn", "v-old", kWaitLimit).ok());
  const LeaseId dead = old->lease();
  old->Abandon();  // the process died: the key stays until its lease expires
  auto next = NewNode(kNanosPerSecond);
  ASSERT_TRUE(next->Register("reborn", "v-new", kWaitLimit).ok());
  auto kv = Stored("reborn");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, "v-new");
  EXPECT_NE(kv->lease, dead);
  EXPECT_EQ(kv->lease, next->lease());
}

// The key deleted while the lease lives (an operator, a dead duplicate's expiry): put back under
// the same lease, counted as a registration (watchers saw the node leave and come back).
TEST_F(MembershipTest, ADeletedKeyIsPutBackUnderItsLease) {
  auto node = NewNode(2 * kNanosPerSecond);
  ASSERT_TRUE(node->Register("persistent", "v", kWaitLimit).ok());
  const LeaseId lease = node->lease();
  Inbox<NodeEvent> events;
  auto observer = MakeMembership(client_.get(), 2 * kNanosPerSecond);
  auto watch = observer->WatchNodes([&](const NodeEvent& e) { events.Push(e); });
  ASSERT_TRUE(watch.ok());

  ASSERT_TRUE(client_->Delete(Membership::NodeKey("c1", "persistent")).ok());
  ASSERT_TRUE(events.WaitFor([](const auto& es) {
    return Has(es, NodeEvent::Kind::kLeft, "persistent") &&
           Has(es, NodeEvent::Kind::kJoined, "persistent");
  })) << "the key was not put back";
  ASSERT_TRUE(WaitUntil([&] { return node->registrations() == 2; }));
  auto kv = Stored("persistent");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->lease, lease);
  EXPECT_EQ(node->lease(), lease);
  EXPECT_TRUE(node->registered());
}

}  // namespace
}  // namespace dualpath::coord
