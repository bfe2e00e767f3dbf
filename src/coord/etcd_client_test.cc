// EtcdClient against a real etcd: KV, compare-and-set transactions, leases (expiry, keep-alive,
// revoke), watches (and their resumption across an etcd restart), and bad input.
#include "dualpath/coord/etcd_client.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "coord/etcd_fixture_test.h"
#include "dualpath/coord/etcd_test_server.h"

namespace dualpath::coord {
namespace {

TEST(PrefixRangeEndTest, RaisesTheLastByteBelow0xff) {
  EXPECT_EQ(PrefixRangeEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixRangeEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
}

TEST(EtcdClientOptionsTest, BadEndpointsAreNamed) {
  struct Case {
    const char* endpoints;
    const char* says;
  } cases[] = {
      {"", "empty"},
      {"localhost", "expected host:port"},
      {"127.0.0.1:0", "port '0'"},
      {"127.0.0.1:70000", "port '70000'"},
      {"127.0.0.1:2379,,127.0.0.1:2380", "empty endpoint"},
      {"unix:", "has no path"},
      {"unix:/run/etcd.sock,127.0.0.1:2379", "must be the only one"},
  };
  for (const Case& c : cases) {
    EtcdOptions options;
    options.endpoints = c.endpoints;
    auto client = EtcdClient::Connect(options);
    ASSERT_FALSE(client.ok()) << c.endpoints;
    EXPECT_EQ(client.status().code(), Code::kInvalidArgument) << c.endpoints;
    EXPECT_NE(client.status().message().find(c.says), std::string::npos)
        << c.endpoints << ": " << client.status().ToString();
  }
  EtcdOptions options;
  options.endpoints = "127.0.0.1:2379";
  options.rpc_timeout = 0;
  EXPECT_EQ(EtcdClient::Connect(options).status().code(), Code::kInvalidArgument);
}

TEST(EtcdClientOptionsTest, NoEtcdIsUnavailableWithinTheDeadline) {
  // A port nothing listens on.
  EtcdOptions options;
  options.endpoints = "127.0.0.1:1";  // tcpmux: closed on any sane test machine
  options.tls.insecure = true;
  options.rpc_timeout = kNanosPerSecond;
  auto client = EtcdClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto put = client.value()->Put("/k", "v");
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), Code::kUnavailable) << put.status().ToString();
  EXPECT_NE(put.status().message().find("etcd Put /k at 127.0.0.1:1: not reachable within 1.0 s"),
            std::string::npos)
      << put.status().ToString();
}

// The test server's etcd exits at once (as when another process took its port before it bound
// it): the first Start tries again on new ports, 4 times in all, and then says that etcd exited,
// instead of waiting 30 s for an answer from a process that is gone.
TEST(EtcdTestServerTest, AnEtcdThatExitsAtOnceIsStartedAgainOnNewPortsThenReported) {
  char dir_tmpl[] = "/tmp/dp-etcd-exit-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_tmpl), nullptr);
  const std::string dir = dir_tmpl;
  const std::string script = dir + "/etcd";
  const std::string calls = dir + "/calls";
  {
    std::ofstream f(script);
    // Each start records its client URL (--listen-client-urls=...) and exits.
    f << "#!/bin/sh\necho \"$*\" | grep -o 'listen-client-urls=[^ ]*' >> " << calls << "\nexit 3\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  const char* old = std::getenv("DUALPATH_ETCD_BIN");
  const std::string saved = old != nullptr ? old : "";
  ASSERT_EQ(::setenv("DUALPATH_ETCD_BIN", script.c_str(), 1), 0);
  Status started;
  {
    EtcdTestServer server;
    started = server.Start();
  }
  if (old != nullptr) {
    ::setenv("DUALPATH_ETCD_BIN", saved.c_str(), 1);
  } else {
    ::unsetenv("DUALPATH_ETCD_BIN");
  }
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.code(), Code::kUnavailable);
  EXPECT_NE(started.message().find("exited before it answered"), std::string::npos)
      << started.ToString();
  std::ifstream in(calls);
  std::set<std::string> urls;
  int starts = 0;
  for (std::string line; std::getline(in, line); ++starts) urls.insert(line);
  EXPECT_EQ(starts, 4);
  EXPECT_GE(urls.size(), 2u) << "every start on the same port";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

using EtcdClientTest = EtcdFixture;

TEST_F(EtcdClientTest, PutGetRangeDelete) {
  EtcdClient& etcd = *client_;
  auto r1 = etcd.Put("/t/a", "1");
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  auto r2 = etcd.Put("/t/b", std::string("2\0x", 3));  // values are bytes
  ASSERT_TRUE(r2.ok());
  ASSERT_TRUE(etcd.Put("/t2", "outside the prefix").ok());
  EXPECT_GT(r2.value(), r1.value());

  auto a = etcd.Get("/t/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(a.value().has_value());
  EXPECT_EQ(a.value()->value, "1");
  EXPECT_EQ(a.value()->create_revision, r1.value());
  EXPECT_EQ(a.value()->version, 1);
  EXPECT_EQ(a.value()->lease, 0);

  auto missing = etcd.Get("/t/none");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing.value().has_value());

  auto range = etcd.Range("/t/");
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  ASSERT_EQ(range.value().kvs.size(), 2u);
  EXPECT_EQ(range.value().kvs[0].key, "/t/a");
  EXPECT_EQ(range.value().kvs[1].value, std::string("2\0x", 3));
  EXPECT_GE(range.value().revision, r2.value());

  auto deleted = etcd.Delete("/t/a");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted.value(), 1);
  EXPECT_EQ(etcd.Delete("/t/a").value(), 0);
  auto prefix_deleted = etcd.DeletePrefix("/t/");
  ASSERT_TRUE(prefix_deleted.ok());
  EXPECT_EQ(prefix_deleted.value(), 1);
  EXPECT_TRUE(etcd.Get("/t2").value().has_value());

  EXPECT_EQ(etcd.Range("").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(etcd.DeletePrefix("").status().code(), Code::kInvalidArgument);
}

TEST_F(EtcdClientTest, CompareAndSet) {
  EtcdClient& etcd = *client_;
  auto first = etcd.PutIfAbsent("/cas", "first");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first.value().succeeded);

  auto second = etcd.PutIfAbsent("/cas", "second");
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second.value().succeeded);
  ASSERT_TRUE(second.value().current.has_value());
  EXPECT_EQ(second.value().current->value, "first");
  const int64_t rev = second.value().current->mod_revision;
  EXPECT_EQ(rev, first.value().revision);

  auto stale = etcd.PutIfModRevision("/cas", rev - 1, "stale");
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale.value().succeeded);
  auto swapped = etcd.PutIfModRevision("/cas", rev, "swapped");
  ASSERT_TRUE(swapped.ok());
  EXPECT_TRUE(swapped.value().succeeded);
  EXPECT_EQ(etcd.Get("/cas").value()->value, "swapped");

  // mod_revision 0 means "absent".
  auto absent = etcd.PutIfModRevision("/cas-new", 0, "new");
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent.value().succeeded);

  EXPECT_FALSE(etcd.DeleteIfModRevision("/cas", rev).value().succeeded);
  EXPECT_TRUE(etcd.DeleteIfModRevision("/cas", swapped.value().revision).value().succeeded);
  EXPECT_FALSE(etcd.Get("/cas").value().has_value());
  EXPECT_EQ(etcd.DeleteIfModRevision("/cas", 0).status().code(), Code::kInvalidArgument);
}

TEST_F(EtcdClientTest, LeaseExpiryDeletesItsKeys) {
  EtcdClient& etcd = *client_;
  EXPECT_EQ(etcd.LeaseGrant(kNanosPerSecond / 2).status().code(), Code::kInvalidArgument);
  auto lease = etcd.LeaseGrant(kNanosPerSecond);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GE(lease.value().ttl_seconds, 1);

  Inbox<WatchEvent> events;
  WatchOptions options;
  options.on_events = [&](const std::vector<WatchEvent>& batch) {
    for (const auto& e : batch) events.Push(e);
  };
  auto watch = etcd.WatchPrefix("/lease/", std::move(options));
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_TRUE(etcd.Put("/lease/k", "v", lease.value().id).ok());
  EXPECT_EQ(etcd.Get("/lease/k").value()->lease, lease.value().id);

  // Nobody keeps the lease alive: etcd expires it and deletes the key.
  ASSERT_TRUE(events.WaitFor([](const std::vector<WatchEvent>& es) {
    return !es.empty() && es.back().type == EventType::kDelete;
  })) << "the key was not deleted by the lease's expiry";
  auto items = events.Items();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].type, EventType::kPut);
  EXPECT_EQ(items[1].kv.key, "/lease/k");
  EXPECT_FALSE(etcd.Get("/lease/k").value().has_value());
  EXPECT_EQ(etcd.LeaseTimeToLive(lease.value().id).status().code(), Code::kCoordLeaseLost);
}

TEST_F(EtcdClientTest, KeepAliveAndRevoke) {
  EtcdClient& etcd = *client_;
  auto lease = etcd.LeaseGrant(5 * kNanosPerSecond);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(etcd.Put("/rv/k", "v", lease.value().id).ok());
  auto stream = etcd.OpenKeepAlive();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  for (int i = 0; i < 3; ++i) {
    auto ttl = stream.value()->KeepAlive(lease.value().id);
    ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
    EXPECT_EQ(ttl.value(), lease.value().ttl_seconds);
  }
  auto left = etcd.LeaseTimeToLive(lease.value().id);
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_GT(left.value(), 0);

  ASSERT_TRUE(etcd.LeaseRevoke(lease.value().id).ok());
  EXPECT_FALSE(etcd.Get("/rv/k").value().has_value());
  auto after = stream.value()->KeepAlive(lease.value().id);
  EXPECT_EQ(after.status().code(), Code::kCoordLeaseLost) << after.status().ToString();
  EXPECT_FALSE(stream.value()->broken());  // an answer, not a broken stream
  EXPECT_EQ(etcd.LeaseRevoke(lease.value().id).code(), Code::kCoordLeaseLost);
}

TEST_F(EtcdClientTest, WatchDeliversFromARevisionAndResumesAfterEtcdRestarts) {
  EtcdClient& etcd = *client_;
  auto before = etcd.Put("/w/old", "1");
  ASSERT_TRUE(before.ok());

  Inbox<WatchEvent> events;
  WatchOptions options;
  options.start_revision = before.value();  // history: the put above is delivered too
  options.on_events = [&](const std::vector<WatchEvent>& batch) {
    for (const auto& e : batch) events.Push(e);
  };
  auto watch = etcd.WatchPrefix("/w/", std::move(options));
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_TRUE(events.WaitFor([](const auto& es) { return es.size() == 1; }));
  EXPECT_EQ(events.Items()[0].kv.key, "/w/old");

  RestartEtcd(/*wipe=*/false);
  ASSERT_TRUE(etcd.WaitForReady(kWaitLimit).ok());
  ASSERT_TRUE(etcd.Put("/w/new", "2").ok());
  ASSERT_TRUE(etcd.Delete("/w/old").ok());
  ASSERT_TRUE(events.WaitFor([](const auto& es) { return es.size() == 3; }))
      << "the watch did not resume after the restart";
  auto items = events.Items();
  EXPECT_EQ(items[1].kv.key, "/w/new");
  EXPECT_EQ(items[1].type, EventType::kPut);
  EXPECT_EQ(items[2].kv.key, "/w/old");
  EXPECT_EQ(items[2].type, EventType::kDelete);
  EXPECT_GE(watch.value()->reconnects(), 1);
}

TEST_F(EtcdClientTest, WatchOfACompactedRevisionIsRefused) {
  EtcdClient& etcd = *client_;
  auto first = etcd.Put("/c/k", "1");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(etcd.Put("/c/k", "2").ok());
  auto last = etcd.Put("/c/k", "3");
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(etcd.Compact(last.value()).ok());
  // etcd confirms the watch, then cancels it: the refusal comes through on_error (or, should
  // etcd refuse at once, from WatchPrefix itself).
  Inbox<Status> errors;
  Inbox<WatchEvent> events;
  WatchOptions options;
  options.start_revision = first.value();
  options.on_events = [&](const std::vector<WatchEvent>& batch) {
    for (const auto& e : batch) events.Push(e);
  };
  options.on_error = [&](const Status& s) { errors.Push(s); };
  auto watch = etcd.WatchPrefix("/c/", std::move(options));
  if (watch.ok()) {
    ASSERT_TRUE(errors.WaitFor([](const auto& v) { return !v.empty(); }));
    EXPECT_EQ(errors.Items()[0].code(), Code::kCoordCompacted) << errors.Items()[0].ToString();
    EXPECT_NE(errors.Items()[0].message().find("compacted"), std::string::npos);
  } else {
    EXPECT_EQ(watch.status().code(), Code::kCoordCompacted) << watch.status().ToString();
  }
  EXPECT_TRUE(events.Items().empty());  // nothing from a history that is gone

  WatchOptions bad;
  bad.start_revision = -1;
  EXPECT_EQ(etcd.WatchPrefix("/x/", bad).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(etcd.WatchPrefix("", WatchOptions{}).status().code(), Code::kInvalidArgument);
}

TEST_F(EtcdClientTest, WatchKeyIsThatKeyOnly) {
  EtcdClient& etcd = *client_;
  Inbox<WatchEvent> events;
  WatchOptions options;
  options.on_events = [&](const std::vector<WatchEvent>& batch) {
    for (const auto& e : batch) events.Push(e);
  };
  auto watch = etcd.WatchKey("/key", std::move(options));
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_TRUE(etcd.Put("/key2", "not watched").ok());
  ASSERT_TRUE(etcd.Put("/key", "watched").ok());
  ASSERT_TRUE(events.WaitFor([](const auto& es) { return !es.empty(); }));
  auto items = events.Items();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].kv.key, "/key");
  EXPECT_EQ(items[0].kv.value, "watched");
  watch.value()->Cancel();
  watch.value()->Cancel();  // idempotent
}

}  // namespace
}  // namespace dualpath::coord
