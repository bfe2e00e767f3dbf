// PeerService before the engine is ready: calls wait for the Decoder instead of failing (the
// scheduler may assign work to a DE the moment it registers), and Close releases them.
#include "engine/peer_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

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

}  // namespace
}  // namespace dualpath::engine
