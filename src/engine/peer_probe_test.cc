// PeerProber against real EnginePeer servers on loopback: what it reports to the scheduler, when
// a peer becomes unreachable and reachable again, that it lets go of one only with the
// scheduler's verdict, and that calls in progress to a peer it let go of end at once. Events come
// from the prober's on_state callback; the only time bound is a hang guard (the prober's own
// schedule is real time, with a short interval).
#include "engine/peer_probe.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/grpc_server.h"
#include "dualpath/transfer/engine.h"
#include "engine/peer_service.h"
#include "lib/silent_listener.h"

namespace dualpath::engine {
namespace {

constexpr auto kGuard = std::chrono::seconds(30);  // a hang guard, not a timing assertion

// An EnginePeer server (Ping answered) on 127.0.0.1:port (0: any).
struct PeerServer {
  PeerService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;

  explicit PeerServer(int port = 0) {
    service.SetPrefill(true);  // Ping is answered by both roles
    grpc::ServerBuilder b;
    b.RegisterService(&service);
    GrpcTls tls;
    tls.insecure = true;
    auto started = StartGrpcServer(b, "EnginePeer", "127.0.0.1:" + std::to_string(port), tls,
                                   kMaxPeerRequestBytes);
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(started->server);
    address = "127.0.0.1:" + std::to_string(started->port);
  }
  ~PeerServer() { Stop(); }
  void Stop() {
    if (server == nullptr) return;
    server->Shutdown(std::chrono::system_clock::now());
    server->Wait();
    server.reset();
  }
};

// The prober's state changes, in order, for the test to wait on.
class Events {
 public:
  void Add(const std::string& name, const std::string& state) {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back(name + " " + state);
    cv_.notify_all();
  }
  // Waits until `n` events were seen (false at the guard); returns them.
  std::vector<std::string> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kGuard, [&] { return seen_.size() >= n; });
    return seen_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> seen_;
};

// A ping's deadline is twice the interval. Under ThreadSanitizer on a loaded 2-core machine a
// fresh channel's first ping takes a few hundred milliseconds: with 20 ms pings and a 300 ms window
// the first ping never answered in time (the peer was "unreachable" before it was ever reached,
// and each fresh channel's ping timed out again). These keep the test's meaning on a slow machine.
constexpr Nanos kInterval = 250 * kNanosPerMilli;
constexpr Nanos kWindow = 2 * kNanosPerSecond;

class PeerProberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transfer::EngineConfig tc;
    tc.ucx_tls = "tcp";
    auto t = transfer::TransferEngine::Create(tc);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transfer_ = std::move(t).value();
    GrpcTls tls;
    tls.insecure = true;
    peers_ = std::make_unique<PeerDirectory>(*transfer_, tls);
  }

  std::unique_ptr<PeerProber> Prober() {
    return std::make_unique<PeerProber>(
        *peers_,
        PeerProber::Options{.self = "p0.0",
                            .interval = kInterval,
                            .window = kWindow,
                            .on_state = [this](const std::string& n, const std::string& state) {
                              events_.Add(n, state);
                            }});
  }

  static google::protobuf::RepeatedField<uint32_t> Ids(std::initializer_list<uint32_t> ids) {
    google::protobuf::RepeatedField<uint32_t> out;
    for (uint32_t id : ids) out.Add(id);
    return out;
  }

  static google::protobuf::RepeatedPtrField<control::v1::PeerEngine> Peer(
      const std::string& address) {
    google::protobuf::RepeatedPtrField<control::v1::PeerEngine> peers;
    control::v1::PeerEngine* p = peers.Add();
    p->set_engine_id(7);
    p->set_name("d9.0");
    p->set_peer_addr(address);
    return peers;
  }

  std::unique_ptr<transfer::TransferEngine> transfer_;
  std::unique_ptr<PeerDirectory> peers_;
  Events events_;
};

TEST_F(PeerProberTest, APeerThatStopsAnsweringIsLetGoOfOnlyWithTheSchedulersVerdict) {
  auto server = std::make_unique<PeerServer>();
  const std::string address = server->address;
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  std::unique_ptr<PeerProber> prober = Prober();
  prober->SetPeers(Peer(address));
  EXPECT_EQ(events_.WaitFor(1), std::vector<std::string>{"d9.0 reachable"});
  control::v1::EngineReport report;
  prober->AddReach(&report);
  ASSERT_EQ(report.reach_size(), 1);
  EXPECT_EQ(report.reach(0).engine_id(), 7u);
  EXPECT_GE(report.reach(0).ok_age_ms(), 0);  // answered

  // The server goes away: after the window without an answer it is unreachable here, but this
  // engine does not let go of it on its own view (the scheduler has not re-submitted anything).
  server->Stop();
  ASSERT_EQ(events_.WaitFor(2).size(), 2u);
  EXPECT_EQ(events_.WaitFor(2)[1], "d9.0 unreachable");
  EXPECT_FALSE(prober->Gone("d9.0"));
  EXPECT_TRUE(prober->CheckReachable("d9.0", "decode").ok());
  // The scheduler cuts it off (this engine is id 1): let go of, disconnected, refused at once.
  prober->SetCutOff(Ids({7}), 1);
  ASSERT_EQ(events_.WaitFor(3).size(), 3u);
  EXPECT_EQ(events_.WaitFor(3)[2], "d9.0 released");
  EXPECT_TRUE(prober->Gone("d9.0"));
  EXPECT_TRUE(prober->Released("d9.0"));
  const Status refused = prober->CheckReachable("d9.0", "decode");
  EXPECT_EQ(refused.code(), Code::kEnginePeerFailed);
  EXPECT_NE(refused.message().find("decode engine d9.0 unreachable over the compute network"),
            std::string::npos)
      << refused.ToString();
  EXPECT_FALSE(prober->Gone("d8.0"));  // not a probed peer: nothing known

  // Back on the same address: the next answered ping makes it reachable again.
  server = std::make_unique<PeerServer>(port);
  ASSERT_EQ(events_.WaitFor(4).size(), 4u);
  EXPECT_EQ(events_.WaitFor(4)[3], "d9.0 reachable");
  EXPECT_FALSE(prober->Gone("d9.0"));
  EXPECT_TRUE(prober->CheckReachable("d9.0", "decode").ok());
  prober->Stop();
}

TEST_F(PeerProberTest, CallsInProgressToAPeerLetGoOfEndAtOnce) {
  // A host that accepts connections and never answers (a link that died mid-connection looks the
  // same from here): pings and calls alike get nothing back.
  net_testing::SilentListener host(64);
  ASSERT_TRUE(host.ok());
  const std::string address = host.address();

  // A StartDecode in progress with the request timeout's deadline (a minute), as the PE makes it.
  grpc::Status got;
  std::string why;
  std::atomic<bool> returned{false};
  std::thread caller([&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    PeerCall call(*peers_, address, ctx);
    v1::StartDecodeRequest req;
    v1::StartDecodeReply reply;
    got = peers_->Stub(address)->StartDecode(&ctx, req, &reply);
    why = call.cancelled();
    returned = true;
  });
  std::unique_ptr<PeerProber> prober = Prober();
  prober->SetPeers(Peer(address));
  EXPECT_EQ(events_.WaitFor(1), std::vector<std::string>{"d9.0 unreachable"});
  // Unreachable here only: the call goes on (its channel's own connect timeout is 20 s).
  EXPECT_FALSE(returned.load());
  // The scheduler cuts this engine itself off (id 3): it lets go of every peer it cannot reach.
  prober->SetCutOff(Ids({3}), 3);
  EXPECT_EQ(events_.WaitFor(2).back(), "d9.0 released");
  caller.join();  // ends with the cancel, not the deadline (the hang guard is the test timeout)
  EXPECT_EQ(got.error_code(), grpc::StatusCode::CANCELLED) << got.error_message();
  EXPECT_NE(why.find("d9.0 unreachable over the compute network"), std::string::npos) << why;
  EXPECT_NE(prober->CheckReachable("d9.0", "decode").message().find("this engine cut off"),
            std::string::npos);
  control::v1::EngineReport report;
  prober->AddReach(&report);
  ASSERT_EQ(report.reach_size(), 1);
  EXPECT_EQ(report.reach(0).ok_age_ms(), -1);  // never answered
  EXPECT_GE(report.reach(0).probing_ms(), kWindow / kNanosPerMilli);
  prober->Stop();
}

}  // namespace
}  // namespace dualpath::engine
