#include "dualpath/engine/scheduler_link.h"

#include "dualpath/control/client.h"

namespace dualpath::engine {
namespace {

namespace v1c = control::v1;

// The engine's side of the one scheduler client (dualpath/control/client.h): deadlines, the
// wait for a service that starts after the engine, and the error mapping are the client's.
class GrpcSchedulerLink final : public SchedulerLink {
 public:
  GrpcSchedulerLink(const std::string& address, const GrpcTls& tls)
      : client_(address, control::ClientOptions{.tls = tls}) {}

  Result<v1c::RegisterEngineReply> Register(const v1c::RegisterEngineRequest& request) override {
    return client_.RegisterEngine(request);
  }
  Result<v1c::FetchReply> Fetch(const v1c::FetchRequest& request) override {
    return client_.Fetch(request);
  }
  Status ReportResult(const v1c::RequestResult& result) override {
    return client_.ReportResult(result);
  }

 private:
  control::Client client_;
};

}  // namespace

std::unique_ptr<SchedulerLink> ConnectScheduler(const std::string& address, const GrpcTls& tls) {
  return std::make_unique<GrpcSchedulerLink>(address, tls);
}

}  // namespace dualpath::engine
