// control::Client against a scripted Scheduler service (in-process, on a Unix socket in a scratch
// directory): every RPC reaches the service and back, refusals keep their code and name the call,
// long polls get their wait beyond the call timeout, a missing service fails at once naming its
// address, and RegisterEngine waits for a service that starts late. No sleeps.
#include "dualpath/control/client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "dualpath/common/grpc_server.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/control/v1/scheduler.grpc.pb.h"

namespace dualpath::control {
namespace {

constexpr uint32_t kVocab = 512;

// Milliseconds left until the call's deadline, as the service sees it.
int64_t MillisLeft(const grpc::ServerContext* ctx) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(ctx->deadline() -
                                                               std::chrono::system_clock::now())
      .count();
}

// Answers every RPC from its request (so a test can tell the reply came from the call it made)
// and records what a call's deadline left.
class ScriptedScheduler final : public v1::Scheduler::Service {
 public:
  grpc::Status RegisterEngine(grpc::ServerContext*, const v1::RegisterEngineRequest* req,
                              v1::RegisterEngineReply* reply) override {
    reply->set_engine_id(static_cast<uint32_t>(req->engine().name().size()));
    reply->set_system("dualpath");
    return grpc::Status::OK;
  }
  grpc::Status Fetch(grpc::ServerContext* ctx, const v1::FetchRequest* req,
                     v1::FetchReply* reply) override {
    fetch_left_ms = MillisLeft(ctx);
    reply->set_shutdown(req->group_id() == 7);
    return grpc::Status::OK;
  }
  grpc::Status ReportResult(grpc::ServerContext*, const v1::RequestResult* req,
                            v1::ReportResultReply*) override {
    if (req->request_id() == 0) return ToGrpc(NotFound("report: unknown request_id 0"));
    ++results;
    return grpc::Status::OK;
  }
  grpc::Status Submit(grpc::ServerContext* ctx, const v1::SubmitRequest* req,
                      v1::SubmitReply* reply) override {
    submit_left_ms = MillisLeft(ctx);
    if (Status s = ValidateRequest(req->request(), kVocab); !s.ok()) {
      return ToGrpc(s.WithContext("submit"));
    }
    reply->set_hit_tokens(req->request().prompt_size());
    return grpc::Status::OK;
  }
  grpc::Status WaitResults(grpc::ServerContext* ctx, const v1::WaitResultsRequest* req,
                           v1::WaitResultsReply* reply) override {
    wait_left_ms = MillisLeft(ctx);
    reply->add_results()->set_seq(req->after_seq() + 1);
    return grpc::Status::OK;
  }
  grpc::Status ListEngines(grpc::ServerContext*, const v1::ListEnginesRequest*,
                           v1::ListEnginesReply* reply) override {
    reply->add_engines()->set_name("p0.0");
    reply->add_engine_ids(0);
    reply->add_alive(true);
    return grpc::Status::OK;
  }
  grpc::Status Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                        v1::ShutdownReply*) override {
    shutdown = true;
    return grpc::Status::OK;
  }

  std::atomic<int64_t> fetch_left_ms{0};
  std::atomic<int64_t> submit_left_ms{0};
  std::atomic<int64_t> wait_left_ms{0};
  std::atomic<int> results{0};
  std::atomic<bool> shutdown{false};
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/var/tmp/dp_control_client_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    address_ = "unix:" + dir_ + "/sched.sock";
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void StartService() {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    auto started = StartGrpcServer(builder, "scripted scheduler", address_, GrpcTls{},
                                   kMaxSchedulerRequestBytes);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(started->server);
  }

  std::string dir_;
  std::string address_;
  ScriptedScheduler service_;
  std::unique_ptr<grpc::Server> server_;
};

v1::SubmitRequest Submit(uint64_t id, int prompt_tokens) {
  v1::SubmitRequest req;
  v1::RequestSpec* s = req.mutable_request();
  s->set_request_id(id);
  for (int i = 0; i < prompt_tokens; ++i) s->add_prompt(static_cast<uint32_t>(i));
  s->set_gen_tokens(1);
  return req;
}

TEST_F(ClientTest, EveryRpcReachesTheServiceAndBack) {
  StartService();
  Client c(address_);
  EXPECT_EQ(c.address(), address_);
  ASSERT_TRUE(c.WaitForConnected(10 * kNanosPerSecond).ok());

  v1::RegisterEngineRequest reg;
  reg.mutable_engine()->set_name("p0.0");
  auto r = c.RegisterEngine(reg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->engine_id(), 4u);

  v1::FetchRequest fetch;
  fetch.set_group_id(7);
  auto f = c.Fetch(fetch);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->shutdown());

  v1::RequestResult result;
  result.set_request_id(5);
  ASSERT_TRUE(c.ReportResult(result).ok());
  EXPECT_EQ(service_.results.load(), 1);

  auto s = c.Submit(Submit(3, 10));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->hit_tokens(), 10);

  v1::WaitResultsRequest wait;
  wait.set_after_seq(41);
  auto w = c.WaitResults(wait);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->results_size(), 1);
  EXPECT_EQ(w->results(0).seq(), 42u);

  auto engines = c.ListEngines();
  ASSERT_TRUE(engines.ok()) << engines.status().ToString();
  ASSERT_EQ(engines->engines_size(), 1);
  EXPECT_EQ(engines->engines(0).name(), "p0.0");

  ASSERT_TRUE(c.Shutdown().ok());
  EXPECT_TRUE(service_.shutdown.load());
}

TEST_F(ClientTest, RefusalsKeepTheirCodeAndNameTheCall) {
  StartService();
  Client c(address_);
  auto empty = c.Submit(Submit(3, 0));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(empty.status().message(),
            "scheduler Submit at " + address_ + ": submit: request 3: empty prompt");
  auto big = Submit(4, 3);
  big.mutable_request()->set_prompt(1, kVocab);
  EXPECT_EQ(c.Submit(big).status().code(), Code::kInvalidArgument);

  v1::RequestResult unknown;
  const Status report = c.ReportResult(unknown);
  EXPECT_EQ(report.code(), Code::kNotFound);
  EXPECT_NE(report.message().find("unknown request_id 0"), std::string::npos) << report.message();
}

TEST_F(ClientTest, LongPollsGetTheirWaitBeyondTheCallTimeout) {
  StartService();
  Client c(address_, ClientOptions{.rpc_timeout = 5 * kNanosPerSecond});
  v1::FetchRequest fetch;
  fetch.set_wait_ms(60'000);
  ASSERT_TRUE(c.Fetch(fetch).ok());
  // The deadline is the wait plus the call timeout: never shorter than the wait itself. (The
  // upper bounds allow 1 s: gRPC sends a deadline as a timeout rounded up to a coarse unit.)
  EXPECT_GT(service_.fetch_left_ms.load(), 60'000);
  EXPECT_LE(service_.fetch_left_ms.load(), 66'000);
  v1::WaitResultsRequest wait;
  wait.set_wait_ms(30'000);
  ASSERT_TRUE(c.WaitResults(wait).ok());
  EXPECT_GT(service_.wait_left_ms.load(), 30'000);
  EXPECT_LE(service_.wait_left_ms.load(), 36'000);
  // A plain call gets the call timeout alone.
  ASSERT_TRUE(c.Submit(Submit(1, 1)).ok());
  EXPECT_LE(service_.submit_left_ms.load(), 6'000);
  EXPECT_GT(service_.submit_left_ms.load(), 0);
}

TEST_F(ClientTest, AMissingServiceFailsAtOnceNamingItsAddress) {
  Client c("unix:" + dir_ + "/nothing.sock");
  auto engines = c.ListEngines();
  ASSERT_FALSE(engines.ok());
  EXPECT_EQ(engines.status().code(), Code::kUnavailable);
  EXPECT_EQ(engines.status().message().rfind(
                "scheduler ListEngines at unix:" + dir_ + "/nothing.sock: ", 0),
            0u)
      << engines.status().message();
  const Status wait = c.WaitForConnected(100 * kNanosPerMilli);
  EXPECT_EQ(wait.code(), Code::kUnavailable);
  EXPECT_NE(wait.message().find("not reachable within 0.1 s"), std::string::npos) << wait.message();
}

TEST_F(ClientTest, RegisterEngineWaitsForAServiceThatStartsLate) {
  Client c(address_);
  // The channel has tried and failed: it is backing off when the service comes up.
  ASSERT_FALSE(c.WaitForConnected(50 * kNanosPerMilli).ok());
  StartService();
  v1::RegisterEngineRequest reg;
  reg.mutable_engine()->set_name("d0.0");
  auto r = c.RegisterEngine(reg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->engine_id(), 4u);
}

TEST(ReadSideNameTest, NamesEverySide) {
  EXPECT_EQ(ReadSideName(v1::READ_SIDE_PREFILL), "prefill");
  EXPECT_EQ(ReadSideName(v1::READ_SIDE_DECODE), "decode");
  EXPECT_EQ(ReadSideName(v1::READ_SIDE_SPLIT), "split");
  EXPECT_EQ(ReadSideName(v1::READ_SIDE_NONE), "none");
  EXPECT_EQ(ReadSideName(v1::READ_SIDE_UNSPECIFIED), "unspecified");
}

}  // namespace
}  // namespace dualpath::control
