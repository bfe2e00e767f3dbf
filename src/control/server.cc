#include "dualpath/control/server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "dualpath/common/grpc_server.h"
#include "dualpath/common/log.h"
#include "dualpath/control/client.h"

namespace dualpath::control {

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& listen,
                                                            const ServiceOptions& options,
                                                            const GrpcTls& tls) {
  if (listen.empty()) return InvalidArgument("control: empty listen address");
  std::unique_ptr<ControlServer> s(new ControlServer());
  ASSIGN_OR_RETURN(s->service_, SchedulerService::Create(options));

  grpc::ServerBuilder builder;
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(s->service_.get());
  // Refuses an address another server holds ("address in use") instead of taking it over, and a
  // request larger than the protocol's largest (client.h: kMaxSchedulerRequestBytes).
  ASSIGN_OR_RETURN(GrpcServerStart started,
                   StartGrpcServer(builder, "control", listen, tls, kMaxSchedulerRequestBytes));
  s->server_ = std::move(started.server);
  s->address_ = std::move(started.address);
  s->liveness_ = std::thread([p = s.get()] { p->LivenessLoop(); });
  return s;
}

ControlServer::~ControlServer() {
  RequestStop();
  if (liveness_.joinable()) liveness_.join();
  if (service_ != nullptr) service_->Stop();  // long polls return now
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
}

void ControlServer::LivenessLoop() {
  // Checks four times per heartbeat, so an engine is declared dead at most 1.25 x 3 heartbeats
  // after its last fetch. Fetches check too; this covers a cluster where nobody fetches.
  const auto period = std::chrono::microseconds(
      std::max<int64_t>(1000, static_cast<int64_t>(service_->options().heartbeat_s * 1e6 / 4)));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (cv_.wait_for(lock, period, [this] { return stop_; })) break;
    lock.unlock();
    service_->CheckLiveness();
    lock.lock();
  }
}

bool ControlServer::Wait() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return service_->Finished();
    }
    // WaitFinished wakes on every state change; the timeout only bounds how late a RequestStop
    // from another thread is noticed.
    if (service_->WaitFinished(std::chrono::milliseconds(100))) return true;
  }
}

void ControlServer::RequestStop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

}  // namespace dualpath::control
