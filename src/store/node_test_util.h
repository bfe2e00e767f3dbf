// Shared by the store node's etcd tests (node_client_test.cc, node_master_test.cc): a real etcd per
// test (dualpath/coord/etcd_test_server.h), a client of it, a temporary shm directory, bounded
// waits (a hang guard, not a timing assertion), and the objects the tests put and read. Skips the
// test, saying why, when Debian's etcd is not installed.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/coord/etcd_client.h"
#include "dualpath/coord/etcd_test_server.h"
#include "dualpath/store/client.h"
#include "dualpath/store/node.h"

namespace dualpath::store::testing {

// The hang guard of every wait: far beyond anything etcd or the nodes need on a loaded machine.
inline constexpr Nanos kWaitLimit = 60 * kNanosPerSecond;

// Polls `done` every 10 ms until it holds or `limit` passed; returns whether it held.
inline bool WaitUntil(const std::function<bool()>& done, Nanos limit = kWaitLimit) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(limit);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

inline GrpcTls Insecure() {
  GrpcTls tls;
  tls.insecure = true;
  return tls;
}

inline constexpr char kCluster[] = "storetest";
inline constexpr uint64_t kDram = 1 << 20;
inline constexpr uint64_t kObject = 64 << 10;

inline ObjectKey Key(uint32_t n) {
  ObjectKey k;
  k.model_fingerprint = 0xfeedbeef;
  for (size_t i = 0; i < k.hash.bytes.size(); ++i) {
    k.hash.bytes[i] = static_cast<uint8_t>(n * 31 + i);
  }
  return k;
}

inline std::vector<std::byte> Bytes(uint32_t seed, size_t n = kObject) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// Puts objects [first, first + count) with bytes Bytes(i); every item must succeed.
inline void PutAll(StoreClient& c, uint32_t first, uint32_t count) {
  std::vector<std::vector<std::byte>> data;
  std::vector<PutItem> items;
  for (uint32_t i = first; i < first + count; ++i) data.push_back(Bytes(i));
  for (uint32_t i = 0; i < count; ++i) items.push_back(PutItem{Key(first + i), data[i]});
  auto r = c.Put(items);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const Status& s : *r) EXPECT_TRUE(s.ok()) << s.ToString();
}

struct Read {
  std::vector<ReadResult> results;
  std::vector<std::vector<std::byte>> bufs;
};

inline Read GetAll(StoreClient& c, uint32_t first, uint32_t count) {
  Read out;
  out.bufs.assign(count, std::vector<std::byte>(kObject));
  std::vector<GetItem> items;
  for (uint32_t i = 0; i < count; ++i) items.push_back(GetItem{Key(first + i), out.bufs[i]});
  auto r = c.GetInto(items);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) out.results = std::move(r).value();
  return out;
}

// Every object of a GetAll(c, first, count) was read, from `source`, with the bytes put. Call it
// in ASSERT_NO_FATAL_FAILURE: a failed read ends the test, as the loop it replaced did.
inline void ExpectReadAll(const Read& r, uint32_t first, uint32_t count, ReadSource source) {
  for (uint32_t i = 0; i < count; ++i) {
    ASSERT_TRUE(r.results[i].status.ok()) << r.results[i].status.ToString();
    EXPECT_EQ(r.results[i].source, source);
    EXPECT_EQ(r.bufs[i], Bytes(first + i));
  }
}

class StoreEtcdFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (coord::EtcdTestServer::Binary().empty()) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd from Debian's etcd-server, "
                      "scripts/setup.sh; or set DUALPATH_ETCD_BIN): skipping the etcd tests";
    }
    Status started = server_.Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    auto client = coord::EtcdClient::Connect(Etcd());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
    char tmpl[] = "/tmp/dualpath-store-node-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    shm_dir_ = tmpl;
  }
  void TearDown() override {
    StopAll();
    if (!shm_dir_.empty()) std::filesystem::remove_all(shm_dir_);
  }
  // Subclasses stop their servers here, before etcd goes.
  virtual void StopAll() { nodes_.clear(); }

  coord::EtcdOptions Etcd() {
    coord::EtcdOptions o;
    o.endpoints = server_.endpoint();
    o.tls.insecure = true;  // the test etcd serves plaintext on 127.0.0.1
    o.rpc_timeout = 5 * kNanosPerSecond;
    return o;
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

  NodeOptions NodeOpts(uint32_t id) {
    NodeOptions o;
    o.cluster = kCluster;
    o.etcd = Etcd();
    o.id = NodeId(id);
    o.host = "host-" + std::to_string(id);
    o.dram_bytes = kDram;
    o.shm_dir = shm_dir_;
    o.transfer.ucx_tls = "tcp";  // loopback TCP works everywhere the tests run
    o.rpc_tls = Insecure();
    o.master_tls = Insecure();
    o.membership_ttl = 2 * kNanosPerSecond;
    o.join_backoff_max = 200 * kNanosPerMilli;
    o.leader_poll = 200 * kNanosPerMilli;
    return o;
  }

  StoreNode* AddNode(uint32_t id) {
    auto node = StoreNode::Start(NodeOpts(id));
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    if (!node.ok()) return nullptr;
    nodes_.push_back(std::move(node).value());
    return nodes_.back().get();
  }

  // host: "" never matches a node (remote reads only); "host-N": beside node N.
  std::unique_ptr<StoreClient> NewStoreClient(const std::string& host, uint32_t replicas,
                                              uint32_t local_node = 0,
                                              uint32_t exists_in_flight = 1,
                                              Nanos exists_poll = ClientOptions{}.exists_poll,
                                              bool transfer_poll = true) {
    ClientOptions o;
    o.cluster = kCluster;
    o.etcd = Etcd();
    o.master_tls = Insecure();
    o.host = host.empty() ? "client-host" : host;
    o.shm_dir = shm_dir_;  // where the nodes keep their tier files
    o.local_node = NodeId(local_node);
    o.transfer.ucx_tls = "tcp";
    o.replicas = replicas;
    o.staging_bytes = 64 << 10;  // small: the staging buffer must grow for a batch
    o.exists_in_flight = exists_in_flight;
    o.exists_poll = exists_poll;
    o.transfer_poll = transfer_poll;
    auto c = StoreClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  coord::EtcdTestServer server_;
  std::unique_ptr<coord::EtcdClient> client_;  // destroyed before server_
  std::string shm_dir_;
  std::vector<std::unique_ptr<StoreNode>> nodes_;
};

}  // namespace dualpath::store::testing
