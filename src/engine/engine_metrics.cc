#include "engine/engine_metrics.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "dualpath/common/stats.h"

namespace dualpath::engine {
namespace {

const std::vector<std::string> kEngineLabels = {"system", "engine", "node", "role"};

// Batches kept for PrefillBatchJson: a day of 10 ms batches is under a million; beyond, the
// counters still count and the JSON summarizes the first ones.
constexpr size_t kMaxBatchRecords = size_t{1} << 22;

std::vector<std::string> Plus(std::vector<std::string> a, std::vector<std::string> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The slowest rank's attention time and the ranks' mean (idle ranks included); 0 for no ranks.
struct RankSpread {
  double max_ns = 0;
  double avg_ns = 0;
};
RankSpread SpreadOf(std::span<const int64_t> rank_ns) {
  RankSpread s;
  double sum = 0;
  for (int64_t t : rank_ns) {
    s.max_ns = std::max(s.max_ns, static_cast<double>(t));
    sum += static_cast<double>(t);
  }
  if (!rank_ns.empty()) s.avg_ns = sum / static_cast<double>(rank_ns.size());
  return s;
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
              .With(With({}))),
      decode_spread_steps_(
          group_
              .Counter("dualpath_engine_decode_spread_steps_total",
                       "Decode steps whose batch ran its attention on more than one of the "
                       "engine's ranks (--ranks, continuous batching); their per-rank attention "
                       "is in dualpath_engine_attention_{max,avg}_ns_total.",
                       kEngineLabels)
              .With(With({}))),
      prefill_batches_(group_
                           .Counter("dualpath_engine_prefill_batches_total",
                                    "Forward batches (prefill passes over all layers) this "
                                    "prefill engine ran.",
                                    kEngineLabels)
                           .With(With({}))),
      prefill_batch_requests_(
          group_
              .Counter("dualpath_engine_prefill_batch_requests_total",
                       "Sum over forward batches of the requests (chunks) in the batch; divided by "
                       "dualpath_engine_prefill_batches_total: the mean batch.",
                       kEngineLabels)
              .With(With({}))),
      prefill_batch_tokens_(group_
                                .Counter("dualpath_engine_prefill_batch_tokens_total",
                                         "New tokens computed by forward batches.", kEngineLabels)
                                .With(With({}))),
      attention_max_ns_(
          group_
              .Counter("dualpath_engine_attention_max_ns_total",
                       "Sum over forward batches (a decode engine: its spread decode steps) of "
                       "the slowest rank's attention CPU time (ns); "
                       "divided by dualpath_engine_attention_avg_ns_total: the time-weighted "
                       "attention max/avg across ranks.",
                       kEngineLabels)
              .With(With({}))),
      attention_avg_ns_(group_
                            .Counter("dualpath_engine_attention_avg_ns_total",
                                     "Sum over forward batches (a decode engine: its spread "
                                     "decode steps) of the ranks' mean attention CPU time (ns), "
                                     "idle ranks included.",
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
  metrics::CounterFamily& rack = group_.Counter(
      "dualpath_engine_rack_pool_bytes_total",
      "KV payload bytes this engine wrote into (dir=\"write\") or read out of (dir=\"read\") the "
      "rack pool (--kv-substrate rack-pool).",
      Plus(kEngineLabels, {"dir"}));
  rack_pool_bytes_[0] = &rack.With(With({"write"}));
  rack_pool_bytes_[1] = &rack.With(With({"read"}));
}

uint64_t EngineMetrics::TransferredBytes() const {
  uint64_t n = 0;
  for (const auto& by_op : transfer_bytes_) {
    for (const metrics::Counter* c : by_op) n += c != nullptr ? c->Value() : 0;
  }
  return n;
}

void EngineMetrics::OnRackPool(uint64_t written, uint64_t read) {
  if (written > 0) rack_pool_bytes_[0]->Inc(written);
  if (read > 0) rack_pool_bytes_[1]->Inc(read);
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

void EngineMetrics::OnDecodeStep(size_t requests, std::span<const int64_t> rank_ns) {
  decode_steps_.Inc();
  decode_step_requests_.Inc(requests);
  if (rank_ns.empty()) return;
  decode_spread_steps_.Inc();
  const RankSpread spread = SpreadOf(rank_ns);
  attention_max_ns_.Inc(static_cast<uint64_t>(spread.max_ns));
  attention_avg_ns_.Inc(static_cast<uint64_t>(spread.avg_ns));
}

void EngineMetrics::OnPrefillBatch(size_t requests, int64_t tokens,
                                   std::span<const int64_t> rank_ns,
                                   std::span<const double> planned_ns,
                                   std::span<const double> reference_ns) {
  BatchRecord rec;
  rec.requests = static_cast<uint32_t>(requests);
  rec.tokens = tokens;
  const RankSpread spread = SpreadOf(rank_ns);
  rec.max_ns = spread.max_ns;
  rec.avg_ns = spread.avg_ns;
  if (planned_ns.size() == rank_ns.size() && reference_ns.size() == rank_ns.size()) {
    double planned_sum = 0;
    for (size_t r = 0; r < rank_ns.size(); ++r) {
      rec.planned_max_ns = std::max(rec.planned_max_ns, planned_ns[r]);
      planned_sum += planned_ns[r];
      const double measured = static_cast<double>(rank_ns[r]);
      rec.planned_abs_err_ns += std::abs(planned_ns[r] - measured);
      rec.reference_abs_err_ns += std::abs(reference_ns[r] - measured);
    }
    if (!rank_ns.empty()) rec.planned_avg_ns = planned_sum / static_cast<double>(rank_ns.size());
  }
  prefill_batches_.Inc();
  prefill_batch_requests_.Inc(requests);
  prefill_batch_tokens_.Inc(static_cast<uint64_t>(std::max<int64_t>(tokens, 0)));
  attention_max_ns_.Inc(static_cast<uint64_t>(rec.max_ns));
  attention_avg_ns_.Inc(static_cast<uint64_t>(rec.avg_ns));
  std::lock_guard<std::mutex> lock(batch_mu_);
  if (rank_ns.size() > rank_ns_.size()) rank_ns_.resize(rank_ns.size(), 0);
  ranks_ = std::max<uint32_t>(ranks_, static_cast<uint32_t>(rank_ns.size()));
  for (size_t r = 0; r < rank_ns.size(); ++r) rank_ns_[r] += rank_ns[r];
  if (batches_.size() < kMaxBatchRecords) batches_.push_back(rec);
}

void EngineMetrics::OnAttentionModel(const sched::AttentionTimeModel& model, uint64_t samples) {
  std::lock_guard<std::mutex> lock(batch_mu_);
  model_ = model;
  model_samples_ = samples;
  model_set_ = true;
}

std::string EngineMetrics::PrefillBatchJson() const {
  std::lock_guard<std::mutex> lock(batch_mu_);
  nlohmann::json j;
  j["engine"] = labels_.engine;
  j["node"] = labels_.node;
  j["ranks"] = ranks_;
  j["batches"] = batches_.size();
  double requests = 0, tokens = 0;
  uint32_t max_requests = 0;
  for (const BatchRecord& b : batches_) {
    requests += b.requests;
    tokens += static_cast<double>(b.tokens);
    max_requests = std::max(max_requests, b.requests);
  }
  const double n = static_cast<double>(std::max<size_t>(batches_.size(), 1));
  j["mean_requests"] = requests / n;
  j["max_requests"] = max_requests;
  j["mean_tokens"] = tokens / n;
  j["rank_attention_s"] = nlohmann::json::array();
  for (int64_t t : rank_ns_) j["rank_attention_s"].push_back(static_cast<double>(t) * 1e-9);
  // Attention max/avg across ranks over the measured batches (or, `planned`, as the planning
  // model predicted them); `full`: only batches with at least as many requests as ranks (with
  // fewer, some rank is idle whatever the placement).
  auto balance = [&](bool full_only, bool planned) {
    std::vector<double> ratios;
    double sum_max = 0, sum_avg = 0;
    for (const BatchRecord& b : batches_) {
      const double mx = planned ? b.planned_max_ns : b.max_ns;
      const double avg = planned ? b.planned_avg_ns : b.avg_ns;
      if (b.avg_ns <= 0 || avg <= 0 || (full_only && b.requests < ranks_)) continue;
      ratios.push_back(mx / avg);
      sum_max += mx;
      sum_avg += avg;
    }
    nlohmann::json o;
    o["batches"] = ratios.size();
    if (ratios.empty()) {
      o["mean"] = o["p50"] = o["p90"] = o["weighted"] = nullptr;
      return o;
    }
    double mean = 0;
    for (double r : ratios) mean += r;
    o["mean"] = mean / static_cast<double>(ratios.size());
    o["p50"] = Percentile(ratios, 0.5);
    o["p90"] = Percentile(ratios, 0.9);
    o["weighted"] = sum_max / sum_avg;
    return o;
  };
  j["attention_max_avg"] = balance(false, false);
  j["attention_max_avg_full"] = balance(true, false);
  j["planned_max_avg"] = balance(false, true);
  j["planned_max_avg_full"] = balance(true, true);
  // The time models' error against the measured rank times: Σ |predicted - measured| / Σ
  // measured over the busy ranks of every batch that has predictions, for the model each batch
  // was planned with and for the fixed reference model.
  {
    double planned = 0, reference = 0, measured = 0;
    for (const BatchRecord& b : batches_) {
      if (b.planned_avg_ns <= 0) continue;
      planned += b.planned_abs_err_ns;
      reference += b.reference_abs_err_ns;
      measured += b.avg_ns * static_cast<double>(ranks_);
    }
    nlohmann::json e;
    e["planned"] = measured > 0 ? nlohmann::json(planned / measured) : nlohmann::json(nullptr);
    e["reference"] = measured > 0 ? nlohmann::json(reference / measured) : nlohmann::json(nullptr);
    j["model_error"] = e;
  }
  if (model_set_) {
    j["attention_model"] = {{"fixed_ns", model_.fixed_ns},
                            {"per_chunk_ns", model_.per_chunk_ns},
                            {"per_token_ns", model_.per_token_ns},
                            {"per_cached_pair_ns", model_.per_cached_pair_ns},
                            {"per_token_sq_ns", model_.per_token_sq_ns},
                            {"per_cached_pair_ctx_ns", model_.per_cached_pair_ctx_ns},
                            {"samples", model_samples_}};
  }
  return j.dump();
}

uint64_t EngineMetrics::ReadBytes() const { return read_bytes_.Value(); }

void EngineMetrics::AddCallbacks(const storage::BlockStore& store,
                                 std::function<control::v1::EngineReport()> report,
                                 std::function<storage::WriteBehindStats()> write_behind,
                                 const RackLink* rack_cache) {
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
  if (rack_cache != nullptr) {
    // The rack prefix cache is a tier of its own: looked up before the store (docs/metrics.md).
    auto rack = [rack_cache](uint64_t RackLinkStats::*field) {
      return [rack_cache, field] { return static_cast<double>(rack_cache->Stats().*field); };
    };
    lookups.Add(With({"rack", "hit"}), rack(&RackLinkStats::prefix_hits));
    lookups.Add(With({"rack", "miss"}), rack(&RackLinkStats::prefix_misses));
    lookups.Add(With({"rack", "corrupt"}), rack(&RackLinkStats::prefix_corrupt));
    group_
        .Callback("dualpath_engine_rack_prefix_bytes_total",
                  "Block file bytes of the hits this engine read from the rack prefix cache "
                  "(verified; with the store's dualpath_store_read_bytes_total, where its hits "
                  "came from).",
                  Type::kCounter, kEngineLabels)
        .Add(With({}), rack(&RackLinkStats::prefix_bytes));
    group_
        .Callback("dualpath_engine_rack_prefix_published_total",
                  "Blocks this engine published into the rack prefix cache.", Type::kCounter,
                  kEngineLabels)
        .Add(With({}), rack(&RackLinkStats::prefix_published));
  }
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
