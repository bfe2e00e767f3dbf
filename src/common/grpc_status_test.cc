// The one Status <-> gRPC table (grpc_status.h): every dualpath code and every gRPC code survives
// a round trip, in the code where the table pairs it both ways and in the text otherwise.
#include "dualpath/common/grpc_status.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dualpath {
namespace {

std::vector<Code> AllCodes() {
  return {
#define DUALPATH_X(name, value, desc) Code::name,
      DUALPATH_STATUS_CODES(DUALPATH_X)
#undef DUALPATH_X
  };
}

// gRPC's 17 codes (grpcpp/impl/codegen/status_code_enum.h), OK included.
std::vector<grpc::StatusCode> AllGrpcCodes() {
  std::vector<grpc::StatusCode> out;
  for (int c = grpc::StatusCode::OK; c <= grpc::StatusCode::UNAUTHENTICATED; ++c) {
    out.push_back(static_cast<grpc::StatusCode>(c));
  }
  return out;
}

TEST(GrpcStatusTest, OkIsOkBothWays) {
  EXPECT_TRUE(ToGrpc(Status::Ok()).ok());
  EXPECT_TRUE(FromGrpc(grpc::Status::OK, "call").ok());
}

TEST(GrpcStatusTest, EveryDualpathCodeRoundTrips) {
  for (Code c : AllCodes()) {
    if (c == Code::kOk) continue;
    SCOPED_TRACE(std::string(CodeName(c)));
    const grpc::Status wire = ToGrpc(Status(c, "boom"));
    EXPECT_EQ(wire.error_code(), GrpcCodeFor(c));
    const Status back = FromGrpc(wire, "call");
    EXPECT_EQ(back.code(), CodeForGrpc(GrpcCodeFor(c)));
    if (back.code() == c) {
      // Paired both ways: the code says it all, the text is the message alone.
      EXPECT_EQ(wire.error_message(), "boom");
      EXPECT_EQ(back.message(), "call: boom");
    } else {
      // The code read back is the common condition; the text names the original code.
      EXPECT_NE(back.message().find(std::string(CodeName(c))), std::string::npos) << back.message();
      EXPECT_NE(back.message().find("boom"), std::string::npos) << back.message();
    }
    // Forwarding what was read travels as the same gRPC code again.
    EXPECT_EQ(ToGrpc(back).error_code(), wire.error_code());
  }
}

TEST(GrpcStatusTest, EveryGrpcCodeRoundTrips) {
  for (grpc::StatusCode g : AllGrpcCodes()) {
    if (g == grpc::StatusCode::OK) continue;
    SCOPED_TRACE(static_cast<int>(g));
    const Status read = FromGrpc(grpc::Status(g, "refused"), "scheduler Fetch at unix:/x");
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.code(), CodeForGrpc(g));
    EXPECT_EQ(read.message().rfind("scheduler Fetch at unix:/x: refused", 0), 0u) << read.message();
    const bool lossy = g == grpc::StatusCode::ABORTED || g == grpc::StatusCode::UNAUTHENTICATED;
    EXPECT_EQ(GrpcCodeFor(read.code()) == g, !lossy);
    if (lossy) {
      // No dualpath code of its own: the gRPC code is kept in the text.
      EXPECT_NE(read.message().find("(gRPC code " + std::to_string(static_cast<int>(g)) + ")"),
                std::string::npos)
          << read.message();
    } else {
      EXPECT_EQ(read.message(), "scheduler Fetch at unix:/x: refused");
      EXPECT_EQ(ToGrpc(read).error_code(), g);
    }
  }
  // UNKNOWN is a failed call and nothing more. (A value outside gRPC's enum cannot be made
  // without undefined behaviour, which UBSan reports, so the default branch is tested this way.)
  const Status odd = FromGrpc(grpc::Status(grpc::StatusCode::UNKNOWN, "?"), "call");
  EXPECT_EQ(odd.code(), Code::kControlRpcError);
  EXPECT_EQ(odd.message().rfind("call: ?", 0), 0u) << odd.message();
}

TEST(GrpcStatusTest, NamesakesAndComponentCodes) {
  EXPECT_EQ(GrpcCodeFor(Code::kInvalidArgument), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GrpcCodeFor(Code::kTimeout), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(GrpcCodeFor(Code::kUnavailable), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GrpcCodeFor(Code::kFailedPrecondition), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(GrpcCodeFor(Code::kNotFound), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GrpcCodeFor(Code::kIoError), grpc::StatusCode::INTERNAL);
  // Bad input stays bad input across the wire (a CLI client exits 2 for it).
  EXPECT_EQ(CodeForGrpc(GrpcCodeFor(Code::kKvBadToken)), Code::kInvalidArgument);
  EXPECT_EQ(CodeForGrpc(GrpcCodeFor(Code::kParseError)), Code::kInvalidArgument);
  // An engine with no room refuses with RESOURCE_EXHAUSTED, naming why.
  const grpc::Status no_room = ToGrpc(Status(Code::kEngineNoRoom, "area of 4096 bytes"));
  EXPECT_EQ(no_room.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(no_room.error_message(), Status(Code::kEngineNoRoom, "area of 4096 bytes").ToString());
}

TEST(GrpcStatusTest, AnOverLimitRequestIsNamedForTheClient) {
  for (const char* grpc_text : {"Received message larger than max (268435462 vs. 2097152)",
                                "Received RST_STREAM with error code 11"}) {
    const Status s = FromGrpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, grpc_text),
                              "store master Exists at 127.0.0.1:7400");
    EXPECT_EQ(s.code(), Code::kResourceExhausted);
    EXPECT_NE(s.message().find(grpc_text), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("larger than the server accepts"), std::string::npos)
        << s.ToString();
  }
  // The service's own RESOURCE_EXHAUSTED (a full pool, no room) keeps its text.
  const Status own =
      FromGrpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "pool index full"), "pool");
  EXPECT_EQ(own.message().find("larger than the server accepts"), std::string::npos);
}

}  // namespace
}  // namespace dualpath
