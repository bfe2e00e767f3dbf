// The coord tests' fixture: a real etcd per test (EtcdTestServer), a client of it, and helpers to
// wait for conditions with a bounded deadline (a hang guard, not a timing assertion). Skips the
// test, saying why, when Debian's etcd is not installed.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dualpath/coord/etcd_client.h"
#include "dualpath/coord/etcd_test_server.h"

namespace dualpath::coord {

// The hang guard of every wait in these tests: far beyond anything etcd needs on a loaded machine.
inline constexpr Nanos kWaitLimit = 60 * kNanosPerSecond;

// Polls `done` every 10 ms until it holds or `limit` passed; returns whether it held. For states
// that no callback announces (a count of answered keep-alives, a listing after a restart).
inline bool WaitUntil(const std::function<bool()>& done, Nanos limit = kWaitLimit) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(limit);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Things callbacks deliver on other threads, and a wait for a condition over them.
template <typename T>
class Inbox {
 public:
  void Push(T v) {
    {
      std::lock_guard lock(mu_);
      items_.push_back(std::move(v));
    }
    cv_.notify_all();
  }
  // Waits until `pred(items)` holds (true) or the limit passed (false).
  bool WaitFor(const std::function<bool(const std::vector<T>&)>& pred, Nanos limit = kWaitLimit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::nanoseconds(limit), [&] { return pred(items_); });
  }
  std::vector<T> Items() {
    std::lock_guard lock(mu_);
    return items_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<T> items_;
};

class EtcdFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdTestServer::Binary().empty()) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd from Debian's etcd-server, "
                      "scripts/setup.sh; or set DUALPATH_ETCD_BIN): skipping the etcd tests";
    }
    Status started = server_.Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<EtcdClient> NewClient() {
    EtcdOptions options;
    options.endpoints = server_.endpoint();
    options.tls.insecure = true;  // the test etcd serves plaintext on 127.0.0.1
    options.rpc_timeout = 5 * kNanosPerSecond;
    auto client = EtcdClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  // Kills etcd (SIGKILL) and starts it again on the same ports; `wipe`: without its data.
  void RestartEtcd(bool wipe) {
    server_.Kill();
    if (wipe) {
      Status s = server_.WipeData();
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    Status s = server_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  EtcdTestServer server_;
  std::unique_ptr<EtcdClient> client_;  // destroyed before server_
};

}  // namespace dualpath::coord
