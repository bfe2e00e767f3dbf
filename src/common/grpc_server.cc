#include "dualpath/common/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "dualpath/common/listen.h"

namespace dualpath {
namespace {

// The file of a unix:PATH or unix://ABSOLUTE_PATH address; empty for other addresses
// (unix-abstract: sockets have no file and no permissions).
std::string UnixSocketPath(const std::string& listen) {
  if (listen.rfind("unix://", 0) == 0) return listen.substr(7);
  if (listen.rfind("unix:", 0) == 0) return listen.substr(5);
  return "";
}

}  // namespace

int64_t GrpcTransportQuota(int64_t max_receive_bytes) {
  return kGrpcQuotaFactor * max_receive_bytes + kGrpcQuotaSlackBytes;
}

Result<GrpcServerStart> StartGrpcServer(grpc::ServerBuilder& builder, const std::string& what,
                                        const std::string& listen, const GrpcTls& tls,
                                        int64_t max_receive_bytes) {
  if (listen.empty()) return InvalidArgument(what + ": empty listen address");
  if (max_receive_bytes < 1 || max_receive_bytes > kGrpcMaxReceiveLimit) {
    return InvalidArgument(what + ": largest request of " + std::to_string(max_receive_bytes) +
                           " bytes is outside [1, " + std::to_string(kGrpcMaxReceiveLimit) + "]");
  }
  // A TCP listener without TLS and without --insecure is refused here, before anything binds.
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   GrpcServerCredentials(tls, what, listen));
  // Before gRPC unlinks a unix socket that is in use, or shares a TCP port.
  RETURN_IF_ERROR(CheckListenAddress(listen).WithContext(what));
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Bounded requests (grpc_server.h): the size check itself, and the quota on what the transport
  // buffers before that check can run. The builder keeps its own reference to the quota.
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_receive_bytes));
  grpc::ResourceQuota quota(what + " transport");
  quota.Resize(static_cast<size_t>(GrpcTransportQuota(max_receive_bytes)));
  builder.SetResourceQuota(quota);
  GrpcServerStart out;
  builder.AddListeningPort(listen, credentials, &out.port);
  const std::string socket_path = UnixSocketPath(listen);
  // A unix socket is owner-only (0600): any local user who can connect can drive the service.
  // gRPC creates the file at bind with the process umask, so the umask is tightened around the
  // bind (no window with a wider mode) and the mode is set again after it.
  const mode_t old_umask = socket_path.empty() ? 0 : ::umask(0177);
  out.server = builder.BuildAndStart();
  if (!socket_path.empty()) ::umask(old_umask);
  const bool is_unix = IsUnixAddress(listen);
  // gRPC reports a failed bind as no server, or (TCP) a server with selected port 0.
  if (out.server == nullptr || (!is_unix && out.port == 0)) {
    if (out.server != nullptr) out.server->Shutdown();
    return ListenFailure(what, listen);
  }
  if (!socket_path.empty() && ::chmod(socket_path.c_str(), 0600) != 0) {
    const int err = errno;
    out.server->Shutdown();
    return Status(Code::kIoError, what + ": chmod 0600 " + socket_path + ": " + std::strerror(err));
  }
  if (is_unix) {
    out.address = listen;
    out.port = 0;
  } else {
    const size_t colon = listen.rfind(':');
    out.address = listen.substr(0, colon) + ":" + std::to_string(out.port);
  }
  return out;
}

}  // namespace dualpath
