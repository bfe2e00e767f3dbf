// grpc_oversize_client ADDRESS METHOD FIELD BYTES: one unary gRPC call of METHOD
// ("/package.Service/Method") whose request is protobuf field FIELD (length-delimited) holding
// BYTES zero bytes: what a client that ignores a server's request limit sends (issue 25 item 7).
// Used by the servers' tests (tests/lib/oversize_request.h) from a process of its own, so that the
// payload's memory is never counted as the server's; the payload is a read-only mapping of zero
// pages, so this process does not hold BYTES of memory either. Plaintext (the tests' servers are
// --insecure or unix sockets).
//
// Prints one line "code=N message=TEXT" (N the gRPC status code) and exits 0 once the call has
// returned, whatever its status; exit 2 on bad arguments, 1 when the call could not be made.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: grpc_oversize_client ADDRESS METHOD FIELD BYTES\n");
    return 2;
  }
  const std::string address = argv[1];
  const std::string method = argv[2];
  const long field = std::strtol(argv[3], nullptr, 10);
  const long long bytes = std::strtoll(argv[4], nullptr, 10);
  if (field < 1 || field > 15 || bytes < 1 || bytes > (1ll << 31) - 64) {
    std::fprintf(stderr, "grpc_oversize_client: FIELD must be 1..15 and BYTES 1..2^31-64\n");
    return 2;
  }
  // Field header: tag (field << 3 | 2: length-delimited) and the length as a varint.
  std::string header(1, static_cast<char>(field << 3 | 2));
  for (uint64_t v = static_cast<uint64_t>(bytes);; v >>= 7) {
    header += static_cast<char>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    if (v < 0x80) break;
  }
  void* zeros = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (zeros == MAP_FAILED) {
    std::perror("grpc_oversize_client: mmap");
    return 1;
  }
  std::vector<grpc::Slice> slices;
  slices.emplace_back(header);
  slices.emplace_back(zeros, static_cast<size_t>(bytes), grpc::Slice::STATIC_SLICE);
  grpc::ByteBuffer request(slices.data(), slices.size());

  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  // A server that accepts the request may answer in kind (the old store master's Exists answer was
  // 8 MiB): taken whole, so that acceptance reads as the OK it is.
  args.SetMaxReceiveMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  // A hang guard only: the servers answer at once.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, method, request, &cq);
  if (call == nullptr) {
    std::fprintf(stderr, "grpc_oversize_client: cannot prepare the call\n");
    return 1;
  }
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok)) {
    std::fprintf(stderr, "grpc_oversize_client: the completion queue shut down\n");
    return 1;
  }
  std::printf("code=%d message=%s\n", static_cast<int>(status.error_code()),
              status.error_message().c_str());
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return 0;
}
