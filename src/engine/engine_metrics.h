// EngineMetrics: what one engine exports on /metrics (docs/metrics.md). Counted here, on the hot
// path (one relaxed atomic add each): storage bytes this engine read for requests (its path: "pe"
// or "de", and its node's storage link), read latencies, KV transfer bytes by traffic class, and
// failed requests by error code. Read at scrape time from counters that already exist (nothing
// counted twice): the block store's StoreStats (hits, misses, corrupt files by tier "store"), the
// engine's own scheduler report (queue lengths) and the write-behind queue.
//
// Ownership: owns its metric families and their registration; the objects the callbacks read must
// outlive it (Engine::Impl declares it after them, so it is destroyed, and unregistered, first).
// Thread safety: every method from any thread; callbacks run on the scraping thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dualpath/common/metrics.h"
#include "dualpath/common/status.h"
#include "dualpath/control/v1/scheduler.pb.h"
#include "dualpath/sched/batch.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/storage/write_behind.h"
#include "dualpath/transfer/engine.h"
#include "engine/rack_link.h"

namespace dualpath::engine {

class EngineMetrics {
 public:
  struct Labels {
    std::string system;  // as the scheduler service said at registration
    std::string engine;  // engine name, e.g. "p0.0"
    std::string node;    // its node (and so its storage link)
    std::string role;    // "prefill" | "decode"
  };
  EngineMetrics(metrics::Registry& registry, Labels labels);

  // A read of hit blocks for one request finished: verified bytes and blocks, wall seconds.
  void OnRead(uint64_t bytes, double seconds);
  // A transfer batch (SizeOf it before Submit moves it) was accepted by the transfer engine.
  struct BatchSize {
    transfer::TrafficClass cls;
    transfer::Op op;
    uint64_t bytes;
  };
  static BatchSize SizeOf(const transfer::Batch& b);
  void OnTransfer(const BatchSize& size);
  // Bytes of every transfer batch this engine submitted (all classes and operations): the KV
  // payload it put over the compute link (notices alone count 0).
  uint64_t TransferredBytes() const;
  // Bytes of verified block files this engine read from its node's storage tier for requests
  // (the sum of OnRead's): what crossed its storage link for hits.
  uint64_t ReadBytes() const;
  // KV payload bytes written into (`written`) or read out of the rack pool (--kv-substrate
  // rack-pool).
  void OnRackPool(uint64_t written, uint64_t read);
  // A request failed on this engine (reported to the scheduler with ok=false).
  void OnFailed(const Status& why);
  // The decode engine ran one decode step over `requests` requests (its batch size). rank_ns:
  // each rank's attention CPU time over all layers when the step's batch spanned more than one
  // rank (EngineOptions::ranks; empty otherwise): counted as a spread step, and in the attention
  // max/avg counters as a forward batch is.
  void OnDecodeStep(size_t requests, std::span<const int64_t> rank_ns = {});
  // The prefill engine ran one forward batch: `requests` chunks (one per request), `tokens` new
  // tokens in all, and each rank's attention CPU time over all layers (empty: not measured, the
  // serial PE). Idle ranks are in rank_ns as 0: they count in the balance, as an idle GPU does.
  // planned_ns / reference_ns (empty, or one per rank, over all layers like rank_ns): what the
  // time model the batch was planned with, and the fixed reference model, predicted per rank.
  void OnPrefillBatch(size_t requests, int64_t tokens, std::span<const int64_t> rank_ns,
                      std::span<const double> planned_ns = {},
                      std::span<const double> reference_ns = {});
  // The time model the PE plans with now (after a refit) and the samples it was fitted to.
  void OnAttentionModel(const sched::AttentionTimeModel& model, uint64_t samples);
  // The forward batches so far as one JSON object (docs/engine.md "Prefill batching": batches,
  // mean requests and tokens per batch, per-rank attention totals, and attention max/avg over the
  // ranks: per batch (mean, p50, p90), time-weighted (Σ max / Σ avg), and the same over "full"
  // batches, those with at least as many requests as ranks; the same max/avg as the planning
  // model predicted it, the models' prediction errors, and the model in use at the end).
  std::string PrefillBatchJson() const;

  // Series read at scrape time. `report` and `write_behind` (may be empty) must be thread-safe.
  // rack_cache: the rack prefix cache (may be null), which must outlive the metrics' scrapes.
  void AddCallbacks(const storage::BlockStore& store,
                    std::function<control::v1::EngineReport()> report,
                    std::function<storage::WriteBehindStats()> write_behind,
                    const RackLink* rack_cache = nullptr);

 private:
  std::vector<std::string> With(std::vector<std::string> extra) const;

  const Labels labels_;
  metrics::Group group_;
  metrics::Counter& read_bytes_;
  metrics::Counter& read_requests_;
  metrics::Histogram& read_seconds_;
  // [class][op], resolved once: no lookup on the hot path.
  metrics::Counter* transfer_bytes_[transfer::kNumClasses][2] = {};
  metrics::CounterFamily& errors_;
  metrics::Counter* rack_pool_bytes_[2] = {};  // [0] written, [1] read
  metrics::Counter& decode_steps_;
  metrics::Counter& decode_step_requests_;
  metrics::Counter& decode_spread_steps_;
  metrics::Counter& prefill_batches_;
  metrics::Counter& prefill_batch_requests_;
  metrics::Counter& prefill_batch_tokens_;
  metrics::Counter& attention_max_ns_;
  metrics::Counter& attention_avg_ns_;

  // One forward batch of the prefill engine, for PrefillBatchJson.
  struct BatchRecord {
    uint32_t requests = 0;
    int64_t tokens = 0;
    double max_ns = 0;  // slowest rank's attention (0: not measured)
    double avg_ns = 0;  // mean over the ranks, idle ones included
    // The planning model's prediction of the same (0: none), and Σ over busy ranks of
    // |predicted - measured| for the planning and the reference model (relative error = these /
    // Σ measured = avg_ns * ranks).
    double planned_max_ns = 0;
    double planned_avg_ns = 0;
    double planned_abs_err_ns = 0;
    double reference_abs_err_ns = 0;
  };
  mutable std::mutex batch_mu_;
  std::vector<BatchRecord> batches_;  // guarded by batch_mu_; at most kMaxBatchRecords
  std::vector<int64_t> rank_ns_;      // guarded by batch_mu_: attention per rank, all batches
  uint32_t ranks_ = 0;                // guarded by batch_mu_
  sched::AttentionTimeModel model_;   // guarded by batch_mu_: the PE's planning model, latest
  uint64_t model_samples_ = 0;        // guarded by batch_mu_
  bool model_set_ = false;            // guarded by batch_mu_
};

}  // namespace dualpath::engine
