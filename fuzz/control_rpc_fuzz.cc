// The scheduler service's RPC handlers: a sequence of well-formed request messages in any order
// (fuzz/proto/dualpath/fuzz/v1/calls.proto) into a real SchedulerService with its real scheduler,
// hit probe (an empty store) and liveness on a manual clock; a fresh service per input. Long polls
// are capped at 0 ms so an input never blocks. Besides the sanitizers, the harness checks that
// every refusal carries a message and that the service's counters stay consistent.
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/log.h"
#include "dualpath/control/service.h"
#include "dualpath/fuzz/v1/calls.pb.h"
#include "fuzz_util.h"

using namespace dualpath;
namespace v1 = dualpath::control::v1;

namespace {

constexpr const char* kSpec = "layers=2,q_heads=2,kv_heads=2,head_dim=16,vocab=512";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::SetLevel(log::Level::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dualpath::fuzz::v1::ControlCalls input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return -1;  // not a call sequence

  ManualClock clock(1'000'000'000);
  control::ServiceOptions o;
  o.system = static_cast<control::SystemKind>(input.system() % 3);
  o.model_spec = kSpec;
  o.block_tokens = 16;
  static const std::string store_root = fuzz::ScratchDir("dualpath_control_fuzz");
  o.store_root = store_root;
  o.store_subdir = "run";
  o.engines = *control::ParseEngineList("p0.0:prefill:p0,d0.0:decode:d0");
  o.heartbeat_s = 1;
  o.max_attempts = 2;
  o.clock = &clock;
  auto service = control::SchedulerService::Create(o);
  if (!service.ok()) fuzz::Broken("service creation failed");
  control::SchedulerService& s = **service;

  for (const dualpath::fuzz::v1::ControlCall& call : input.calls()) {
    grpc::ServerContext ctx;
    switch (call.call_case()) {
      case dualpath::fuzz::v1::ControlCall::kRegisterEngine: {
        v1::RegisterEngineReply reply;
        fuzz::CheckRefusal(s.RegisterEngine(&ctx, &call.register_engine(), &reply));
        break;
      }
      case dualpath::fuzz::v1::ControlCall::kFetch: {
        v1::FetchRequest req = call.fetch();
        req.set_wait_ms(0);
        v1::FetchReply reply;
        fuzz::CheckRefusal(s.Fetch(&ctx, &req, &reply));
        break;
      }
      case dualpath::fuzz::v1::ControlCall::kReportResult: {
        v1::ReportResultReply reply;
        fuzz::CheckRefusal(s.ReportResult(&ctx, &call.report_result(), &reply));
        break;
      }
      case dualpath::fuzz::v1::ControlCall::kSubmit: {
        v1::SubmitReply reply;
        fuzz::CheckRefusal(s.Submit(&ctx, &call.submit(), &reply));
        break;
      }
      case dualpath::fuzz::v1::ControlCall::kWaitResults: {
        v1::WaitResultsRequest req = call.wait_results();
        req.set_wait_ms(0);
        v1::WaitResultsReply reply;
        fuzz::CheckRefusal(s.WaitResults(&ctx, &req, &reply));
        break;
      }
      case dualpath::fuzz::v1::ControlCall::kListEngines: {
        v1::ListEnginesReply reply;
        fuzz::CheckRefusal(s.ListEngines(&ctx, &call.list_engines(), &reply));
        if (reply.engines_size() != reply.engine_ids_size() ||
            reply.engines_size() != reply.alive_size() ||
            reply.engines_size() != reply.reachable_size()) {
          fuzz::Broken("ListEngines columns of different lengths");
        }
        break;
      }
      case dualpath::fuzz::v1::ControlCall::kShutdown: {
        v1::ShutdownReply reply;
        fuzz::CheckRefusal(s.Shutdown(&ctx, &call.shutdown(), &reply));
        break;
      }
      case dualpath::fuzz::v1::ControlCall::kAdvanceClockMs:
        clock.Advance(Nanos{call.advance_clock_ms()} * 1'000'000);
        s.CheckLiveness();
        break;
      case dualpath::fuzz::v1::ControlCall::CALL_NOT_SET:
        break;
    }
  }
  const control::ServiceStats st = s.stats();
  if (st.completed + st.failed > st.submitted) fuzz::Broken("more results than submissions");
  if (st.submitted < 0 || st.assigned < 0 || st.resubmitted < 0) fuzz::Broken("negative counter");
  s.Stop();
  return 0;
}
