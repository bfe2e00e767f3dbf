// ServiceClient over the one scheduler client (dualpath/control/client.h): the replayer's side of
// scheduler.proto (Submit, WaitResults). Deadlines, channel settings and the error mapping are
// the client's.
#include <utility>

#include "dualpath/control/client.h"
#include "dualpath/replay/replayer.h"

namespace dualpath::replay {
namespace {

class GrpcServiceClient final : public ServiceClient {
 public:
  GrpcServiceClient(const std::string& address, uint32_t rpc_timeout_ms, const GrpcTls& tls)
      : client_(address, control::ClientOptions{
                             .rpc_timeout = Nanos{rpc_timeout_ms} * kNanosPerMilli, .tls = tls}) {}

  Result<int64_t> Submit(const pb::RequestSpec& spec) override {
    pb::SubmitRequest req;
    *req.mutable_request() = spec;
    ASSIGN_OR_RETURN(pb::SubmitReply reply, client_.Submit(req));
    epoch_ = reply.service_epoch();
    return reply.hit_tokens();
  }

  Result<std::vector<pb::SequencedResult>> WaitResults(uint64_t after_seq,
                                                       uint32_t wait_ms) override {
    pb::WaitResultsRequest req;
    req.set_after_seq(after_seq);
    req.set_wait_ms(wait_ms);
    ASSIGN_OR_RETURN(pb::WaitResultsReply reply, client_.WaitResults(req));
    epoch_ = reply.service_epoch();
    std::vector<pb::SequencedResult> out;
    out.reserve(static_cast<size_t>(reply.results_size()));
    for (pb::SequencedResult& r : *reply.mutable_results()) {
      out.push_back(std::move(r));
    }
    return out;
  }

  uint64_t epoch() const override { return epoch_; }
  Status WaitForService(Nanos timeout) override { return client_.WaitForConnected(timeout); }

 private:
  control::Client client_;
  uint64_t epoch_ = 0;
};

}  // namespace

std::unique_ptr<ServiceClient> MakeGrpcServiceClient(const std::string& address,
                                                     uint32_t rpc_timeout_ms, const GrpcTls& tls) {
  return std::make_unique<GrpcServiceClient>(address, rpc_timeout_ms, tls);
}

}  // namespace dualpath::replay
