// ControlServer: a SchedulerService running on a gRPC server at one address ("unix:PATH" or
// "HOST:PORT"; port 0 picks a free port), plus the liveness thread that declares engines dead
// between fetches. What `dualpath control serve` runs; tests run it in-process on a Unix socket.
//
// Ownership: owns the service, the gRPC server and the liveness thread; the destructor stops all
// three (long polls return at once, then the server shuts down).
// Thread safety: Wait, RequestStop and the accessors may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dualpath/common/grpc_tls.h"
#include "dualpath/common/status.h"
#include "dualpath/control/options.h"
#include "dualpath/control/service.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dualpath::control {

class ControlServer {
 public:
  // Creates the service and starts listening. `tls`: the listener's transport security
  // (dualpath/common/grpc_tls.h; a TCP address needs a certificate or tls.insecure, a unix socket
  // ignores it). kInvalidArgument for bad options or a TCP listener without either, kUnavailable
  // when the address cannot be bound.
  static Result<std::unique_ptr<ControlServer>> Start(const std::string& listen,
                                                      const ServiceOptions& options,
                                                      const GrpcTls& tls = {});
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // The address clients dial ("unix:PATH", or "HOST:PORT" with the bound port).
  const std::string& address() const { return address_; }
  SchedulerService& service() { return *service_; }

  // Blocks until the run is finished (Shutdown RPC and every live engine has seen shutdown) or
  // RequestStop() was called. Returns true if the run finished.
  bool Wait();
  // Makes Wait return (e.g. on SIGTERM, from a signal-watching thread).
  void RequestStop();

 private:
  ControlServer() = default;
  void LivenessLoop();

  std::string address_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread liveness_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace dualpath::control
