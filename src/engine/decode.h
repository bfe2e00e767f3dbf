// Decoder: the decode engine's (DE) side of a request (DualPath §4.1, docs/engine.md).
//
//   StartDecode  (gRPC thread) validates (the carried prompt hashes too), allocates the DE buffer
//   [layers][prompt + gen][bpt] in
//                the registered region (it is also the request's decode-time "HBM" KV, so
//                decode appends in place) and, when the DE has a share of the hit to read, queues
//                the request for the reader stage;
//   reader       (one thread) reads the DE's share of hit blocks into the DE buffer and puts it,
//                layer by layer, into the PE's receive area with a notice per layer carrying how
//                many tokens were really loaded;
//   PrefillDone  (gRPC thread) and the PE's layer notices (transfer progress thread) make the
//                request ready once both are in;
//   decode       (one thread) runs gen_tokens - 1 teacher-forced steps, queues every new full
//                block for write-behind to storage (named by the assignment's prompt hash chain,
//                extended by the kv hasher over the fed tokens), frees the buffer and hands the
//                result to the reporter. EngineOptions::decode_batching says how requests share
//                the thread: kContinuous runs steps over every active request at
//                once (one model::ForwardLayerBatch per layer, each request advancing one token),
//                takes newly ready requests in at step boundaries and retires finished ones;
//                kSerial (the default before issue 28, kept to compare against: docs/engine.md
//                "Decode batching") steps one request until it finishes before
//                taking the next. Both run the same loop and step code, so their tokens and KV
//                are bit-identical (batch invariance, docs/model.md). The loop never waits for
//                the write-behind: a block its full queue refuses stays in the request's buffer
//                and is offered again at a later step boundary (or, with nothing to step, when
//                the write-behind frees space); a finished request whose blocks are not all
//                queued yet holds its buffer ("retiring") and is reported once they are, so the
//                pending blocks take no memory beyond the DE buffers, and a full buffer region
//                pushes back on admission (StartDecode waits for memory), not on the steps;
//   reporter     (one thread) reports results to the scheduler. By default at once: the
//                blocks are written behind, beside the next requests, and a next turn that comes
//                before they are published recomputes them (DualPath §4.1 persists blocks as
//                they fill; it does not hold the answer for them). With
//                EngineOptions::result_after_write it first waits until the blocks queued up to
//                the result's last one are written, so the agent's next turn finds them all; the
//                decode thread never waits for the storage writes either way (on a DualPath DE
//                they queue behind the node's reads: p50 0.15-1.1 s per result on the testbed).
// Requests whose PE aborts them are freed once no put of theirs is in flight. One that stays
// incomplete past the request timeout is failed here (its PrefillDone refused) but its buffer is
// quarantined until the PE can no longer write into it (its PrefillDone or AbortDecode, or the
// prober's release of it): the PE's puts are one-sided, and a buffer reused while they may still
// land would give another request wrong KV.
//
// Thread safety: all public methods may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "dualpath/engine/v1/engine.pb.h"
#include "dualpath/storage/write_behind.h"
#include "engine/context.h"
#include "engine/hit_reader.h"
#include "engine/notice.h"

namespace dualpath::model {
class RankPool;
}  // namespace dualpath::model

namespace dualpath::engine {

// The rank a request joining a continuous decode batch is placed on (data-parallel attention:
// its KV and attention stay on that rank until it leaves): the one with the fewest context tokens
// of the requests already decoding there, the lowest index on ties. `rank_tokens` has one entry
// per rank (at least one).
uint32_t DecodeRankFor(std::span<const int64_t> rank_tokens);

struct DeReq;

class Decoder {
 public:
  explicit Decoder(Context& ctx);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // `cancelled` says whether the PE's call was abandoned (checked after waiting for memory).
  Result<v1::StartDecodeReply> StartDecode(const v1::StartDecodeRequest& req,
                                           const std::function<bool()>& cancelled);
  Status PrefillDone(const v1::PrefillDoneRequest& req);
  // Marks the request aborted and waits (bounded) until no push of its into the PE's area is in
  // flight or can still start; reports whether that was reached.
  Result<v1::AbortDecodeReply> AbortDecode(const v1::AbortDecodeRequest& req);
  void OnNotice(const Notice& n);
  // Makes the threads return and joins them. Idempotent.
  void Stop();

  int64_t unfinished_requests() const;
  int64_t unfinished_tokens() const;
  int64_t queued_read_tokens() const;
  storage::WriteBehindStats write_behind_stats() const { return write_behind_.stats(); }

 private:
  void ReaderLoop();
  void DecodeLoop();
  void ReportLoop();
  // ReportResult to the scheduler; a failure is logged (there is no one else to tell).
  void Report(const control::v1::RequestResult& result);
  void ReadAndPush(const std::shared_ptr<DeReq>& r);
  // A push of r's DE-path KV to its PE failed: queue the attempt's failed result for the
  // reporter (once per request). Requires mu_; the caller notifies report_cv_.
  void PushFailedLocked(DeReq& r, const Status& why);
  // One request being decoded (decode.cc): its fed tokens, block hashes, write-behind position
  // and the tokens generated so far. Owned by the decode thread.
  struct Active;
  // Prepares r for decode steps and writes behind the prompt's blocks the PE computed.
  std::unique_ptr<Active> BeginDecode(const std::shared_ptr<DeReq>& r);
  // One decode step of every request in `batch` (each has steps left): one forward pass over the
  // batch, one token each, then each request's newly full blocks are written behind.
  void Step(std::span<Active* const> batch);
  bool Finished(const Active& a) const;
  // The result of a finished request; frees its buffer and queues the result for the reporter.
  void Finish(Active& a);
  // Fails a request that was being decoded (the engine stops): reported failed, buffer freed.
  void Abandon(Active& a, const Status& why);
  // Whether a has a full block whose positions are all computed and that is not yet queued.
  bool WritesPending(const Active& a) const;
  // Queues a's pending blocks for write-behind in order, never waiting: at most `budget` of them
  // (decremented per block queued). Returns false when the write-behind refused one as full (it
  // stays pending: a's buffer holds its KV), true otherwise.
  bool QueueWrites(Active& a, int& budget);
  // The decode thread's requests. active: in the step batch (serial: at most one). retiring:
  // every step done, some block not yet queued (the write-behind was full); each holds its buffer
  // until its last block is queued, then it is reported.
  struct DecodeState {
    std::vector<std::unique_ptr<Active>> active;
    std::vector<std::unique_ptr<Active>> retiring;
  };
  // The decode loop's body, one step boundary: takes ready requests in (continuous: all, up to
  // EngineOptions::max_decode_batch in the batch; serial:
  // one when none is decoding), runs one step, retires the finished ones, offers pending blocks
  // to the write-behind and reports the retired requests whose blocks are all queued. Waits only
  // when nothing is decoding (for work or for write-behind space). False when the engine stops.
  bool DecodeIteration(DecodeState* st);
  // The write-behind's on_space callback (its worker thread): wakes a decode thread that waits
  // for queue space.
  void OnWriteSpace();
  void MaybeReadyLocked(const std::shared_ptr<DeReq>& r);
  // --kv-substrate rack-pool: a PE's notice naming a rack object; reads it into the buffer.
  void OnRackNotice(const Notice& n);
  // Unpins and deletes the DE-path rack objects this engine wrote for `r` (the PE has them, or
  // the request is gone).
  void ReleaseRackLocked(DeReq& r);
  // Marks requests past their deadline expired; frees those the PE aborted (or that the prober
  // released) once no put of theirs is in flight.
  void ReapLocked(std::vector<std::shared_ptr<DeReq>>* freed);
  void Release(DeReq& r);

  Context& ctx_;
  HitReader reader_;
  storage::WriteBehind write_behind_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, std::shared_ptr<DeReq>> reqs_;  // by DE xfer id; guarded by mu_
  std::deque<std::shared_ptr<DeReq>> to_read_;       // guarded by mu_
  std::deque<std::shared_ptr<DeReq>> ready_;         // guarded by mu_
  // A result for the reporter and the write-behind sequence number (WriteBehind::accepted) its
  // blocks are within: reported once those are written. 0 for a failed result (nothing to wait
  // for).
  struct Outgoing {
    control::v1::RequestResult result;
    uint64_t blocks_seq = 0;
    bool wait_for_blocks = false;  // report only once blocks_seq is written (ReportLoop)
  };
  std::deque<Outgoing> to_report_;     // decoded, blocks queued; guarded by mu_
  std::condition_variable report_cv_;  // reporter: to_report_ or decode stopped
  bool decode_running_ = true;         // guarded by mu_
  uint32_t last_xfer_id_ = 0;          // guarded by mu_
  int64_t queued_read_tokens_ = 0;     // guarded by mu_
  int64_t unfinished_tokens_ = 0;      // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  // The write-behind freed queue space since the decode thread last offered blocks (its on_space
  // callback sets it); guarded by mu_.
  bool write_space_ = false;
  // Decode thread only: one block's staging buffer for the write-behind, and a step's rows.
  std::vector<std::byte> block_;
  std::vector<float> step_hidden_;
  std::vector<float> step_logits_;
  std::vector<model::RefModel::BatchSeq> step_seqs_;
  // Continuous batching with EngineOptions::ranks > 1: the engine's data-parallel attention ranks
  // (threads standing in for its GPUs). Each request decodes on the rank DecodeRankFor chose when
  // it joined; a step's attention runs on all ranks at once and ends with the slowest, the rest
  // of each layer (projections, MLP) over the whole batch. Null otherwise (serial decoding steps
  // one request, which one rank computes). Decode thread only.
  std::unique_ptr<model::RankPool> ranks_;
  std::vector<int64_t> rank_tokens_;  // per rank: context tokens of its active requests
  std::vector<int64_t> rank_ns_;      // a step's per-rank attention CPU time (ForwardLayerBatch)
  std::thread reader_thread_;
  std::thread decode_thread_;
  std::thread report_thread_;
};

}  // namespace dualpath::engine
