// SchedulerService: the gRPC adapter over ControlState.
#include "dualpath/control/service.h"

#include <utility>

#include "control/hit_probe.h"
#include "control/service_metrics.h"
#include "control/state.h"
#include "dualpath/common/grpc_status.h"
#include "dualpath/model/ref_model.h"

namespace dualpath::control {

Result<std::unique_ptr<SchedulerService>> SchedulerService::Create(const ServiceOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(model::RefModelConfig model, model::RefModelConfig::Parse(options.model_spec));
  RETURN_IF_ERROR(model.Validate());
  // Always opened: it hashes every prompt once (the chain goes out with the assignment), and
  // probes hits when there is a store.
  std::vector<std::string> roots;
  if (!options.store_root.empty()) {
    for (const std::string& d : SplitStoreSubdirs(options.store_subdir)) {
      roots.push_back(options.store_root + "/" + d);
    }
    if (roots.empty()) roots.push_back(options.store_root);
  }
  ASSIGN_OR_RETURN(kv::HashAlgo algo, kv::ParseHashAlgo(options.hash_algo));
  ASSIGN_OR_RETURN(
      std::unique_ptr<HitProbe> probe,
      HitProbe::Open(roots, model.Geometry(), algo, options.hash_seed, options.block_tokens,
                     KvStoreProbeOptions{options.kv_store_etcd, options.kv_store_cluster,
                                         options.kv_store_tls},
                     options.store_namespace));
  std::unique_ptr<SchedulerService> service(
      new SchedulerService(std::make_unique<ControlState>(options, model, std::move(probe))));
  if (options.metrics != nullptr) {
    ControlState* state = service->state_.get();
    service->metrics_ = std::make_unique<ServiceMetrics>(
        *options.metrics, std::string(sched::SystemName(options.system)),
        [state] { return state->stats(); });
  }
  return service;
}

grpc::Status SchedulerService::Done(const char* method, const Status& s) {
  if (metrics_ != nullptr) metrics_->OnRpc(method, s);
  return ToGrpc(s);
}

SchedulerService::SchedulerService(std::unique_ptr<ControlState> state)
    : state_(std::move(state)) {}
SchedulerService::~SchedulerService() = default;

grpc::Status SchedulerService::RegisterEngine(grpc::ServerContext*,
                                              const v1::RegisterEngineRequest* req,
                                              v1::RegisterEngineReply* reply) {
  auto r = state_->Register(req->engine());
  if (!r.ok()) return Done("RegisterEngine", r.status());
  *reply = std::move(r).value();
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Fetch(grpc::ServerContext*, const v1::FetchRequest* req,
                                     v1::FetchReply* reply) {
  return Done("Fetch", state_->Fetch(*req, reply));
}

grpc::Status SchedulerService::ReportResult(grpc::ServerContext*, const v1::RequestResult* req,
                                            v1::ReportResultReply*) {
  if (metrics_ != nullptr) metrics_->OnResult(*req);
  return Done("ReportResult", state_->Report(*req));
}

grpc::Status SchedulerService::Submit(grpc::ServerContext*, const v1::SubmitRequest* req,
                                      v1::SubmitReply* reply) {
  const uint64_t id = req->request().request_id();
  const bool recorded = metrics_ != nullptr && metrics_->OnSubmitting(id);
  auto r = state_->Submit(req->request());
  if (!r.ok()) {
    if (recorded) metrics_->OnSubmitRefused(id);
    return Done("Submit", r.status());
  }
  reply->set_hit_tokens(*r);
  reply->set_service_epoch(state_->epoch());
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Place(grpc::ServerContext*, const v1::PlaceRequest* req,
                                     v1::PlaceReply* reply) {
  auto r = state_->Place(*req);
  if (!r.ok()) return Done("Place", r.status());
  *reply->mutable_assignment() = std::move(r).value();
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ReportEngines(grpc::ServerContext*,
                                             const v1::ReportEnginesRequest* req,
                                             v1::ReportEnginesReply* reply) {
  return Done("ReportEngines", state_->ReportEngines(*req, reply));
}

grpc::Status SchedulerService::WaitResults(grpc::ServerContext*, const v1::WaitResultsRequest* req,
                                           v1::WaitResultsReply* reply) {
  state_->WaitResults(*req, reply);
  reply->set_service_epoch(state_->epoch());
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ListEngines(grpc::ServerContext*, const v1::ListEnginesRequest*,
                                           v1::ListEnginesReply* reply) {
  state_->ListEngines(reply);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                                        v1::ShutdownReply*) {
  state_->Shutdown();
  return grpc::Status::OK;
}

int SchedulerService::CheckLiveness() { return state_->CheckLiveness(); }
void SchedulerService::Stop() { state_->Stop(); }
bool SchedulerService::Finished() const { return state_->Finished(); }
bool SchedulerService::WaitFinished(std::chrono::milliseconds timeout) const {
  return state_->WaitFinished(timeout);
}
ServiceStats SchedulerService::stats() const { return state_->stats(); }
const ServiceOptions& SchedulerService::options() const { return state_->options(); }

}  // namespace dualpath::control
