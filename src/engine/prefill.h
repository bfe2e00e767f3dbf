// Prefiller: the prefill engine's (PE) pipeline (DualPath §4.1, docs/engine.md).
//
// Four threads, with the admitted requests between them:
//   loader   takes assignments in order and admits them: allocates the request's receive area
//            ([layers][prompt][bpt] in the registered region: this is the request's "HBM" KV too)
//            and asks the DE to StartDecode (the DE allocates its buffer and, for the DECODE/SPLIT
//            sides, starts reading and pushing its share of the hit KV into the area). It never
//            waits for storage, so every DE starts reading as soon as memory allows;
//   reader   reads the PE's own share of hit blocks from the node's store into the area, one
//            request after another in admission order (the node's storage link is one pipe);
//   compute  runs layerwise prefill of the miss tokens: layer l starts once layer l's DE-path KV
//            has arrived (a notice per layer), then the KV the DE lacks for layer l is put into
//            the DE buffer (low class, notice per layer);
//   complete after the last layer: waits for the request's puts, then sends the first token and
//            its logits digest to the DE in PrefillDone - while compute goes on with the next.
// Admission runs ahead of compute, limited only by buffer memory (and prefetch_requests), so every
// storage link keeps reading the next requests' hit blocks while the current one computes.
// Compute, EngineOptions::prefill_batching:
//   kSerial  takes the oldest admitted request whose hit KV is all in place (its PE read done and,
//            on the DE path, every layer arrived) - a request still waiting for its DE's storage
//            read does not hold up ready ones behind it (§6.2 computes what is loaded). When none
//            is complete it starts the oldest one whose first layer is in, keeping layerwise
//            load/compute overlap. One request's whole prompt per forward pass.
//   kBatched forms each forward batch from every admitted request whose PE read is done and whose
//            first layer of DE-path KV is in (admission order), with sched::PackRanks: per-rank
//            compute quota, chunked prefill (a chunked request goes back to the queue, its KV of
//            every layer in place up to the chunk), chunks placed on the engine's ranks
//            (model::RankPool: each sequence's attention on its rank, the rest of the layer
//            shared). Layer l of the batch waits for layer l of each DE-path request in it, so
//            loading still overlaps compute layer by layer. A request's KV is put to its DE layer
//            by layer during its last chunk (every earlier chunk's KV of that layer is in place).
//            Per-rank attention CPU time of each batch goes to EngineMetrics::OnPrefillBatch.
// Both give bit-identical KV and tokens (batch and chunk invariance, ref_model.h).
//
// A request that fails (DE unreachable or dead, a put failed, a deadline passed, bad input) is
// reported to the scheduler with ok=false; its area is freed only once no peer can still write
// into it.
//
// Thread safety: Enqueue, OnNotice (transfer progress thread), Stop and the load getters may be
// called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "dualpath/sched/attention_fit.h"
#include "engine/context.h"
#include "engine/hit_reader.h"
#include "engine/notice.h"

namespace dualpath::model {
class RankPool;
}  // namespace dualpath::model

namespace dualpath::engine {

struct PeJob;

class Prefiller {
 public:
  explicit Prefiller(Context& ctx);
  ~Prefiller();
  Prefiller(const Prefiller&) = delete;
  Prefiller& operator=(const Prefiller&) = delete;

  void Enqueue(const control::v1::Assignment& a);
  void OnNotice(const Notice& n);
  // Fails queued requests, makes both threads return, joins them. Idempotent.
  void Stop();

  int64_t unfinished_requests() const;
  int64_t unfinished_tokens() const;
  // PE-side hit tokens of requests not yet handed to the store (the store's own queue counts the
  // rest).
  int64_t queued_read_tokens() const;

 private:
  void LoaderLoop();
  void ReaderLoop();
  void ComputeLoop();
  // kBatched's compute loop and one forward batch over `jobs` (plan: sched::PackRanks over them).
  void BatchLoop();
  void RunBatch(std::vector<std::shared_ptr<PeJob>>& jobs, const sched::BatchPlan& plan);
  // After a batch without failed chunks: the planning and reference models' per-rank predictions
  // for the metrics, the measured times into the fit, and (calibrate_attention) the refitted
  // model for the next plan. work: each rank's chunks; rank_ns: measured, all layers.
  void CalibrateAttention(std::span<const sched::RankWork> work, std::span<const int64_t> rank_ns,
                          size_t requests, int64_t tokens);
  // Where recompute starts (the hit KV in place before it): set once, when compute first takes
  // the job (on the DE path after its first layer arrived). Caller holds mu_.
  void BeginLocked(PeJob& job);
  // The PrefillDone for a job whose last token's logits are `logits`.
  void FillDone(PeJob& job, std::span<const float> logits);
  void CompleteLoop();
  // Allocates the area and starts the DE; queues the PE-side read.
  Status Admit(const std::shared_ptr<PeJob>& job);
  // Reads the PE's share of hit blocks into the area.
  void ReadPrefillShare(PeJob& job);
  // The admitted job compute should take next (see the file comment), or nullptr.
  std::shared_ptr<PeJob> TakeReadyLocked();
  // An admitted job that can never become ready (its DE died, or the deadline passed), with
  // give_up set, or nullptr.
  std::shared_ptr<PeJob> TakeStuckLocked();
  // Layerwise prefill; fills job->done. The puts may still be in flight.
  Status Compute(const std::shared_ptr<PeJob>& job);
  // Waits for the job's puts, then PrefillDone at the DE.
  Status Complete(PeJob& job);
  Status WaitLayer(PeJob& job, uint32_t layer);
  // --kv-substrate rack-pool: a DE's notice naming a rack object of DE-path KV; reads it into
  // the job's area (on the transfer engine's progress thread).
  void OnRackNotice(const Notice& n);
  Status WaitPuts(PeJob& job);
  Status PutLayer(const std::shared_ptr<PeJob>& job, uint32_t layer);
  // Aborts the request at the DE; true once no put of the DE's can still land in the area.
  bool ReleaseDe(PeJob& job, const Status& why);
  // Takes the job's PE-side read out of queued_read_tokens_ (once).
  void UncountQueuedReadLocked(PeJob& job);
  // Reports failures, frees the area once it is safe, forgets the job.
  void Finish(const std::shared_ptr<PeJob>& job, Status status);

  Context& ctx_;
  HitReader reader_;
  mutable std::mutex mu_;
  std::condition_variable queue_cv_;   // loader: incoming_; reader: to_read_; compute: a job ready
  std::condition_variable notice_cv_;  // layer notices and put completions
  std::deque<std::shared_ptr<PeJob>> incoming_;         // guarded by mu_
  std::deque<std::shared_ptr<PeJob>> to_read_;          // admitted, PE read pending; guarded by mu_
  std::deque<std::shared_ptr<PeJob>> loaded_;           // admitted, not computing; guarded by mu_
  std::deque<std::shared_ptr<PeJob>> computed_;         // for the completer; guarded by mu_
  std::condition_variable done_cv_;                     // completer: computed_ non-empty or stop
  bool compute_running_ = true;                         // guarded by mu_
  std::map<uint32_t, std::shared_ptr<PeJob>> by_xfer_;  // jobs with an area; guarded by mu_
  uint32_t last_xfer_id_ = 0;                           // guarded by mu_
  int64_t unfinished_requests_ = 0;                     // guarded by mu_
  int64_t unfinished_tokens_ = 0;                       // guarded by mu_
  int64_t queued_read_tokens_ = 0;                      // guarded by mu_
  bool stop_ = false;                                   // guarded by mu_
  size_t computing_ = 0;   // jobs taken by compute (a batch, or one); guarded by mu_
  uint64_t last_seq_ = 0;  // admission order of jobs (PeJob::seq); guarded by mu_
  // kBatched, compute thread only: the time model PackRanks plans with (the reference model's
  // until enough batches were measured, then, with calibrate_attention, the fit to them), the
  // fixed reference model (for its error in the batch stats) and the fit.
  sched::AttentionTimeModel attention_model_;
  sched::AttentionTimeModel reference_model_;
  sched::AttentionFit attention_fit_{kAttentionForget};
  // Each sample weighs 0.995 of the one after it: the fit's memory is ~200 rank samples (~50
  // batches of 4 ranks), long enough to average out one batch's noise, short enough to follow
  // the machine's load.
  static constexpr double kAttentionForget = 0.995;
  // Rank samples before the fit replaces the reference model (several batches' worth, so five
  // terms are not fitted to a handful of points).
  static constexpr uint64_t kMinFitSamples = 24;
  std::unique_ptr<model::RankPool> ranks_;  // kBatched: the engine's ranks; compute thread only
  std::thread loader_;
  std::thread reader_thread_;
  std::thread compute_;
  std::thread completer_;
};

}  // namespace dualpath::engine
