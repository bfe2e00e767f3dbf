// PeerService before the engine is ready: calls wait for the Decoder instead of failing (the
// scheduler may assign work to a DE the moment it registers), and Close releases them. And the
// EnginePeer protocol's reading of the one Status <-> gRPC table (peers.h).
#include "engine/peer_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>

#include "engine/peers.h"
#include "lib/oversize_request.h"

namespace dualpath::engine {
namespace {

TEST(PeerServiceTest, PrefillEngineRefusesAtOnce) {
  PeerService s;
  s.SetPrefill(true);
  grpc::ServerContext ctx;
  v1::PrefillDoneRequest req;
  v1::PrefillDoneReply reply;
  grpc::Status st = s.PrefillDone(&ctx, &req, &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(PeerServiceTest, CallsWaitWhileStartingAndCloseReleasesThem) {
  PeerService s;
  grpc::Status st;
  std::thread caller([&] {
    grpc::ServerContext ctx;  // no deadline: only Close (or the 30 s bound) ends the wait
    v1::AbortDecodeRequest req;
    v1::AbortDecodeReply reply;
    st = s.AbortDecode(&ctx, &req, &reply);
  });
  s.Close();  // whether the caller is already waiting or not, it gets the refusal
  caller.join();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(st.error_message().find("stopping"), std::string::npos) << st.error_message();
}

TEST(PeerStatusTest, ThePeSideReadsARefusalTheProtocolsWay) {
  const std::string what = "StartDecode at d0.0 (10.0.0.2:7000)";
  EXPECT_TRUE(FromGrpc(grpc::Status::OK, what).ok());
  const Status bad = FromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request 5"), what);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.message(), what + ": request 5");
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "late"), what).code(),
            Code::kTimeout);
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"), what).code(),
            Code::kEngineNoRoom);
  // Anything else: the peer failed, its gRPC code kept in the text exactly once.
  for (grpc::StatusCode c : {grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::NOT_FOUND,
                             grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::ABORTED}) {
    const Status failed = FromGrpc(grpc::Status(c, "gone"), what);
    EXPECT_EQ(failed.code(), Code::kEnginePeerFailed) << static_cast<int>(c);
    EXPECT_EQ(failed.message(),
              what + ": gone (gRPC code " + std::to_string(static_cast<int>(c)) + ")");
  }
}

TEST(PeerStatusTest, ADeThatTimedOutWaitingForMemoryRefusesLikeOneWithNoRoom) {
  // prefill.cc's start_refused: RESOURCE_EXHAUSTED means nothing was started at the DE.
  const grpc::Status timed_out = ToPeerGrpc(Timeout("no 4096 bytes of buffer memory free"));
  EXPECT_EQ(timed_out.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(timed_out.error_message().find("kTimeout"), std::string::npos);
  const grpc::Status no_room = ToPeerGrpc(Status(Code::kEngineNoRoom, "area too big"));
  EXPECT_EQ(no_room.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // The PE reads both as no room.
  EXPECT_EQ(FromGrpc(timed_out, "StartDecode").code(), Code::kEngineNoRoom);
  EXPECT_EQ(FromGrpc(no_room, "StartDecode").code(), Code::kEngineNoRoom);
  // Everything else is the table's: a stopping DE is unavailable, bad input stays bad input.
  EXPECT_EQ(ToPeerGrpc(Status(Code::kEngineStopped, "stopping")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToPeerGrpc(InvalidArgument("request 5: empty prompt")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToPeerGrpc(NotFound("request 5 (xfer 3) is not waiting here")).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// Issue 25 item 7: the EnginePeer server took a request of any size (SetMaxReceiveMessageSize(-1)).
// Now one above kMaxPeerRequestBytes is refused with RESOURCE_EXHAUSTED, from a client process of
// its own, and costs the engine at most its transport quota of memory.
TEST(PeerServiceTest, OverLimitRequestIsRefusedWithoutTheEngineGrowing) {
  PeerService service;
  GrpcTls tls;
  tls.insecure = true;
  Result<GrpcServerStart> started = StartPeerServer(service, "127.0.0.1:0", tls);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  // 512 MiB: the engine's limit (49 MiB) and so its transport quota (81 MiB) are the largest of
  // all servers; twice the 256 MiB of the issue keeps the bound (half the request) clear of what
  // the quota plus ASan's redzones and quarantine may cost.
  constexpr int64_t kBytes = int64_t{512} << 20;
  const oversize::Measured m = oversize::SendMeasured(
      "EnginePeer", started->address, "/dualpath.engine.v1.EnginePeer/StartDecode", 1, kBytes);
  EXPECT_EQ(m.call.code, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)) << m.call.output;
  if (oversize::kPeakIsTheServers) {
    EXPECT_LT(m.peak - m.before, kBytes / 2);
  }
  service.Close();
  started->server->Shutdown();
}

}  // namespace
}  // namespace dualpath::engine
