// A peer that dies or stops answering mid-transfer: every outstanding batch completes with
// kTransferPeerDead (within the configured timeout, never a hang), later submissions to it are
// refused, and the engine goes on serving new peers.
//
// The peer is a real process (`dualpath bench transfer --listen`). Synchronisation is by pipe
// (the peer prints its address once listening) and by signals: SIGSTOP freezes the peer so a
// submitted batch is certainly in flight (its flush needs the peer's acknowledgement), then
// SIGKILL or the engine's timeout ends it. No sleeps; the only time bound is a hang guard.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "dualpath/transfer/engine.h"

namespace dualpath::transfer {
namespace {

constexpr auto kGuard = std::chrono::seconds(60);

// A `dualpath bench transfer --listen` child process.
class PeerProcess {
 public:
  PeerProcess() {
    const char* dir = std::getenv("DUALPATH_BINARY_DIR");
    std::string bin = std::string(dir != nullptr ? dir : "build/dev") + "/bin/dualpath";
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      execl(bin.c_str(), bin.c_str(), "bench", "transfer", "--listen", "127.0.0.1:0", "--tls",
            "tcp", "--region-bytes", "67108864", "--user-memory", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    // The child prints "listening on ADDR:PORT" once it accepts peers: that line is the sync.
    FILE* f = fdopen(fds[0], "r");
    char line[256] = {};
    if (fgets(line, sizeof line, f) != nullptr) {
      std::string s(line);
      size_t at = s.find("listening on ");
      if (at != std::string::npos) {
        addr_ = s.substr(at + 13);
        while (!addr_.empty() && (addr_.back() == '\n' || addr_.back() == '\r')) {
          addr_.pop_back();
        }
      }
    }
    out_ = f;
  }
  ~PeerProcess() {
    Signal(SIGKILL);
    Reap();
    if (out_ != nullptr) {
      fclose(out_);
    }
  }
  const std::string& addr() const { return addr_; }
  void Signal(int sig) {
    if (pid_ > 0) {
      kill(pid_, sig);
    }
  }
  void Reap() {
    if (pid_ > 0) {
      int st = 0;
      waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string addr_;
};

struct Fixture {
  std::unique_ptr<TransferEngine> engine;
  std::vector<uint8_t> buf = std::vector<uint8_t>(32 << 20, 0x42);

  Fixture(Nanos timeout, bool post_on_submit) {
    EngineConfig cfg;
    cfg.ucx_tls = "tcp";
    cfg.busy_poll = false;
    cfg.post_on_submit = post_on_submit;
    cfg.peer_timeout = timeout;
    engine = std::move(TransferEngine::Create(cfg)).value();
    EXPECT_TRUE(engine->RegisterRegion(buf.data(), buf.size()).ok());
  }

  // A put batch of 1 MiB descriptors covering `bytes` of the peer's first region.
  Batch BigPut(PeerId peer, uint64_t bytes) {
    std::vector<RegionRange> remote = engine->RemoteRegions(peer).value();
    EXPECT_FALSE(remote.empty());
    Batch b{.peer = peer, .cls = TrafficClass::kLow, .op = Op::kPut};
    for (uint64_t off = 0; off < bytes; off += 1 << 20) {
      b.descs.push_back({reinterpret_cast<uint64_t>(buf.data()) + off % buf.size(),
                         remote[0].addr + off % remote[0].length, 1 << 20});
    }
    return b;
  }

  std::future<Status> Submit(Batch b) {
    auto prom = std::make_shared<std::promise<Status>>();
    auto fut = prom->get_future();
    b.on_complete = [prom](const Status& s) { prom->set_value(s); };
    Status st = engine->Submit(std::move(b));
    if (!st.ok()) {
      prom->set_value(Status(Code::kInternal, "rejected: " + st.ToString()));
    }
    return fut;
  }
};

Status Await(std::future<Status>& f) {
  if (f.wait_for(kGuard) != std::future_status::ready) {
    return Internal("hung: no completion within the guard");
  }
  return f.get();
}

void TransferWorks(Fixture& fx) {
  PeerProcess peer;
  ASSERT_FALSE(peer.addr().empty());
  Result<PeerId> id = fx.engine->Connect(peer.addr());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto f = fx.Submit(fx.BigPut(*id, 8 << 20));
  Status st = Await(f);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Parameter: EngineConfig::post_on_submit (batches posted by the submitting thread must fail
// on a dead or silent peer exactly like queued ones).
class PeerDeathTest : public ::testing::TestWithParam<bool> {};

TEST_P(PeerDeathTest, KilledPeerFailsOutstandingBatchesThenNewPeersWork) {
  Fixture fx(10 * kNanosPerSecond, GetParam());
  PeerProcess peer;
  ASSERT_FALSE(peer.addr().empty());
  Result<PeerId> id = fx.engine->Connect(peer.addr());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto warm = fx.Submit(fx.BigPut(*id, 4 << 20));
  ASSERT_TRUE(Await(warm).ok());

  // Frozen peer: these batches cannot complete (their flushes need the peer), so they are in
  // flight when the peer is killed.
  peer.Signal(SIGSTOP);
  std::vector<std::future<Status>> inflight;
  for (int i = 0; i < 4; ++i) {
    inflight.push_back(fx.Submit(fx.BigPut(*id, 16 << 20)));
  }
  for (auto& f : inflight) {
    EXPECT_NE(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  }
  peer.Signal(SIGKILL);
  peer.Reap();
  for (auto& f : inflight) {
    Status st = Await(f);
    EXPECT_EQ(st.code(), Code::kTransferPeerDead) << st.ToString();
  }
  // The dead peer is refused up front, and gone from the peer list.
  Batch after = fx.BigPut(*id, 1 << 20);
  EXPECT_EQ(fx.engine->Submit(after).code(), Code::kTransferPeerDead);
  EXPECT_TRUE(fx.engine->Peers().empty());
  EXPECT_GE(fx.engine->GetStats().batches_failed, 4u);

  TransferWorks(fx);
}

TEST_P(PeerDeathTest, UnresponsivePeerTimesOut) {
  // The peer is alive (its sockets stay open) but makes no progress: only the engine's own
  // deadline can end the batch.
  Fixture fx(300 * kNanosPerMilli, GetParam());
  PeerProcess peer;
  ASSERT_FALSE(peer.addr().empty());
  Result<PeerId> id = fx.engine->Connect(peer.addr());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  peer.Signal(SIGSTOP);
  auto f = fx.Submit(fx.BigPut(*id, 16 << 20));
  Status st = Await(f);
  EXPECT_EQ(st.code(), Code::kTransferPeerDead) << st.ToString();
  EXPECT_NE(st.message().find("no progress"), std::string::npos) << st.ToString();
  peer.Signal(SIGKILL);
  peer.Reap();

  TransferWorks(fx);
}

// The peer is silent and the timeout far away: a caller that knows it is gone (the engines' probes
// over the compute network) disconnects it, and everything outstanding fails at once.
TEST_P(PeerDeathTest, DisconnectFailsOutstandingBatchesNowAndRefusesLaterOnes) {
  Fixture fx(600 * kNanosPerSecond, GetParam());
  PeerProcess peer;
  ASSERT_FALSE(peer.addr().empty());
  Result<PeerId> id = fx.engine->Connect(peer.addr());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  peer.Signal(SIGSTOP);
  std::vector<std::future<Status>> inflight;
  for (int i = 0; i < 2; ++i) inflight.push_back(fx.Submit(fx.BigPut(*id, 16 << 20)));
  ASSERT_TRUE(fx.engine->Disconnect(*id, "unreachable over the compute network").ok());
  for (auto& f : inflight) {
    Status st = Await(f);
    EXPECT_EQ(st.code(), Code::kTransferPeerDead) << st.ToString();
    EXPECT_NE(st.message().find("disconnected: unreachable"), std::string::npos) << st.ToString();
  }
  EXPECT_EQ(fx.engine->Submit(fx.BigPut(*id, 1 << 20)).code(), Code::kTransferPeerDead);
  EXPECT_TRUE(fx.engine->Peers().empty());
  EXPECT_TRUE(fx.engine->Disconnect(*id, "again").ok());  // already dead: nothing to do
  EXPECT_EQ(fx.engine->Disconnect(PeerId(id->value() + 1000), "x").code(), Code::kNotFound);
  peer.Signal(SIGKILL);
  peer.Reap();

  TransferWorks(fx);
}

TEST_P(PeerDeathTest, DisconnectHostEndsEveryPeerOnThatHost) {
  Fixture fx(600 * kNanosPerSecond, GetParam());
  PeerProcess first, second;
  ASSERT_FALSE(first.addr().empty());
  ASSERT_FALSE(second.addr().empty());
  Result<PeerId> a = fx.engine->Connect(first.addr());
  Result<PeerId> b = fx.engine->Connect(second.addr());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(fx.engine->DisconnectHost("127.0.0.2", "another host"), 0);
  EXPECT_EQ(fx.engine->Peers().size(), 2u);
  EXPECT_EQ(fx.engine->DisconnectHost("127.0.0.1", "its link is down"), 2);
  EXPECT_TRUE(fx.engine->Peers().empty());
  EXPECT_EQ(fx.engine->Submit(fx.BigPut(*a, 1 << 20)).code(), Code::kTransferPeerDead);
  EXPECT_EQ(fx.engine->DisconnectHost("127.0.0.1", "again"), 0);  // already dead
}

INSTANTIATE_TEST_SUITE_P(Submit, PeerDeathTest, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "PostOnSubmit" : "Queued");
});

}  // namespace
}  // namespace dualpath::transfer
