#include "engine/engine_metrics.h"

#include <utility>

namespace dualpath::engine {
namespace {

const std::vector<std::string> kEngineLabels = {"system", "engine", "node", "role"};

std::vector<std::string> Plus(std::vector<std::string> a, std::vector<std::string> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::vector<std::string> EngineMetrics::With(std::vector<std::string> extra) const {
  return Plus({labels_.system, labels_.engine, labels_.node, labels_.role}, std::move(extra));
}

EngineMetrics::EngineMetrics(metrics::Registry& registry, Labels labels)
    : labels_(std::move(labels)),
      group_(registry),
      read_bytes_(group_
                      .Counter("dualpath_engine_read_bytes_total",
                               "Storage bytes (verified block files) this engine read for "
                               "requests, by read path (pe: prefill engine, de: decode engine).",
                               Plus(kEngineLabels, {"path"}))
                      .With(With({labels_.role == "prefill" ? "pe" : "de"}))),
      read_requests_(group_
                         .Counter("dualpath_engine_reads_total",
                                  "Hit-block reads (one per request with blocks on this path).",
                                  kEngineLabels)
                         .With(With({}))),
      read_seconds_(group_
                        .Histogram("dualpath_engine_read_seconds",
                                   "Wall time of one request's hit-block read on this engine.",
                                   kEngineLabels, metrics::LatencyBuckets())
                        .With(With({}))),
      errors_(group_.Counter("dualpath_engine_request_errors_total",
                             "Requests that failed on this engine, by error code.",
                             Plus(kEngineLabels, {"code"}))),
      decode_steps_(group_
                        .Counter("dualpath_engine_decode_steps_total",
                                 "Decode steps (forward passes of one token per active request) "
                                 "this engine ran.",
                                 kEngineLabels)
                        .With(With({}))),
      decode_step_requests_(
          group_
              .Counter("dualpath_engine_decode_step_requests_total",
                       "Sum over decode steps of the requests in the step (the decode batch "
                       "size); divided by dualpath_engine_decode_steps_total: the mean batch.",
                       kEngineLabels)
              .With(With({}))) {
  group_
      .Gauge("dualpath_process_info", "1 for each running dualpath process, by kind and name.",
             {"system", "kind", "name"})
      .With({labels_.system, labels_.role == "prefill" ? "pe" : "de", labels_.engine})
      .Set(1);
  metrics::CounterFamily& transfer = group_.Counter(
      "dualpath_engine_transfer_bytes_total",
      "Bytes of transfer batches this engine submitted, by traffic class and operation.",
      Plus(kEngineLabels, {"class", "op"}));
  for (transfer::TrafficClass c : {transfer::TrafficClass::kHigh, transfer::TrafficClass::kLow}) {
    for (transfer::Op op : {transfer::Op::kPut, transfer::Op::kGet}) {
      transfer_bytes_[transfer::ClassIndex(c)][static_cast<int>(op)] = &transfer.With(
          With({std::string(transfer::ClassName(c)), std::string(transfer::OpName(op))}));
    }
  }
}

void EngineMetrics::OnRead(uint64_t bytes, double seconds) {
  read_bytes_.Inc(bytes);
  read_requests_.Inc();
  read_seconds_.Observe(seconds);
}

EngineMetrics::BatchSize EngineMetrics::SizeOf(const transfer::Batch& b) {
  BatchSize size{b.cls, b.op, 0};
  for (const transfer::Descriptor& d : b.descs) size.bytes += d.length;
  return size;
}

void EngineMetrics::OnTransfer(const BatchSize& size) {
  transfer_bytes_[transfer::ClassIndex(size.cls)][static_cast<int>(size.op)]->Inc(size.bytes);
}

void EngineMetrics::OnFailed(const Status& why) {
  errors_.With(With({std::string(CodeName(why.code()))})).Inc();
}

void EngineMetrics::OnDecodeStep(size_t requests) {
  decode_steps_.Inc();
  decode_step_requests_.Inc(requests);
}

void EngineMetrics::AddCallbacks(const storage::BlockStore& store,
                                 std::function<control::v1::EngineReport()> report,
                                 std::function<storage::WriteBehindStats()> write_behind) {
  using metrics::Type;
  metrics::CallbackFamily& lookups =
      group_.Callback("dualpath_kv_lookups_total",
                      "KV block lookups by tier and result (hit, miss, corrupt, error).",
                      Type::kCounter, Plus(kEngineLabels, {"tier", "result"}));
  const storage::BlockStore* s = &store;
  auto stat = [s](uint64_t storage::StoreStats::*field) {
    return [s, field] { return static_cast<double>(s->stats().*field); };
  };
  lookups.Add(With({"store", "hit"}), stat(&storage::StoreStats::hits));
  lookups.Add(With({"store", "miss"}), stat(&storage::StoreStats::misses));
  lookups.Add(With({"store", "corrupt"}), stat(&storage::StoreStats::corrupt));
  lookups.Add(With({"store", "error"}), stat(&storage::StoreStats::read_errors));
  group_
      .Callback("dualpath_store_read_bytes_total",
                "Bytes of verified block files the node's store read for this engine (tier store).",
                Type::kCounter, kEngineLabels)
      .Add(With({}), stat(&storage::StoreStats::bytes_read));
  group_
      .Callback("dualpath_store_written_bytes_total",
                "Bytes of block files this engine's store published.", Type::kCounter,
                kEngineLabels)
      .Add(With({}), stat(&storage::StoreStats::bytes_written));
  // Queue lengths: the numbers the engine reports to the scheduler with every fetch.
  auto gauge = [&](const char* name, const char* help,
                   int64_t (control::v1::EngineReport::*field)() const) {
    group_.Callback(name, help, Type::kGauge, kEngineLabels).Add(With({}), [report, field] {
      return static_cast<double>((report().*field)());
    });
  };
  gauge("dualpath_engine_unfinished_requests", "Requests on this engine not finished yet.",
        &control::v1::EngineReport::unfinished_requests);
  gauge("dualpath_engine_unfinished_tokens", "Tokens of the requests not finished yet.",
        &control::v1::EngineReport::unfinished_tokens);
  gauge("dualpath_engine_read_queue_tokens",
        "The node's storage read queue in tokens (the store's queue plus this engine's).",
        &control::v1::EngineReport::read_queue_tokens);
  gauge("dualpath_engine_hbm_free_tokens", "Free KV capacity of the engine's buffer, tokens.",
        &control::v1::EngineReport::hbm_free_tokens);
  if (write_behind) {
    group_
        .Callback("dualpath_engine_write_queue_bytes",
                  "Bytes queued for write-behind to the store (decode engines).", Type::kGauge,
                  kEngineLabels)
        .Add(With({}), [write_behind] { return static_cast<double>(write_behind().queued_bytes); });
  }
}

}  // namespace dualpath::engine
