#include "dualpath/common/grpc_channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

namespace dualpath {

grpc::ChannelArguments DefaultChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const GrpcTls& tls) {
  return grpc::CreateCustomChannel(address, GrpcChannelCredentials(tls, address),
                                   DefaultChannelArgs());
}

}  // namespace dualpath
