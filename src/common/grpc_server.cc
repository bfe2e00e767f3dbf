#include "dualpath/common/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include "dualpath/common/listen.h"

namespace dualpath {

Result<GrpcServerStart> StartGrpcServer(grpc::ServerBuilder& builder, const std::string& what,
                                        const std::string& listen) {
  if (listen.empty()) return InvalidArgument(what + ": empty listen address");
  // Before gRPC unlinks a unix socket that is in use, or shares a TCP port.
  RETURN_IF_ERROR(CheckListenAddress(listen).WithContext(what));
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  GrpcServerStart out;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &out.port);
  out.server = builder.BuildAndStart();
  const bool is_unix = listen.rfind("unix", 0) == 0;
  // gRPC reports a failed bind as no server, or (TCP) a server with selected port 0.
  if (out.server == nullptr || (!is_unix && out.port == 0)) {
    if (out.server != nullptr) out.server->Shutdown();
    return ListenFailure(what, listen);
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
