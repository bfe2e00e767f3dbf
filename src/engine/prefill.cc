#include "engine/prefill.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/engine/attention_model.h"
#include "dualpath/model/rank_pool.h"

namespace dualpath::engine {

namespace v1c = control::v1;

struct PeJob {
  v1c::Assignment a;
  ReadPlan plan;
  std::vector<kv::BlockHash> prompt_hashes;  // a.prompt_block_hashes, checked at admission
  std::byte* area = nullptr;                 // [layers][prompt][bpt]
  uint32_t xfer_id = 0;
  // The DE, once StartDecode succeeded.
  bool start_sent = false;     // StartDecode was sent (the DE may hold state even if it failed)
  bool start_refused = false;  // ... and the DE answered it with a refusal (it holds nothing)
  bool de_started = false;
  std::shared_ptr<v1::EnginePeer::Stub> de_stub;
  transfer::PeerId de_peer;
  uint64_t de_addr = 0;
  uint64_t de_stride = 0;
  uint32_t de_xfer_id = 0;
  // PE-side reads.
  bool read_counted = true;  // prefill_read is in queued_read_tokens_; guarded by Prefiller::mu_
  bool pe_pending = false;   // the PE's share is queued or being read; guarded by Prefiller::mu_
  // Set at admission: a DE-path job not ready by then is failed instead of computed.
  std::chrono::steady_clock::time_point ready_deadline;
  Status give_up;  // why compute must fail it at once (dead DE, deadline); guarded by mu_
  int64_t pe_loaded = 0;
  int64_t read_bytes = 0;
  // Guarded by Prefiller::mu_: DE-path layer notices and our puts in flight.
  std::vector<bool> arrived;
  uint32_t arrived_count = 0;
  int64_t de_loaded = 0;
  int puts_pending = 0;
  Status put_error;
  v1::PrefillDoneRequest done;  // filled by Compute, sent by Complete
  // Compute's progress (Prefiller::BeginLocked; guarded by Prefiller::mu_ until compute takes
  // the job, then the compute thread's). Batched compute advances `next` chunk by chunk.
  uint64_t seq = 0;  // admission order
  bool begun = false;
  int64_t loaded = 0;  // recompute starts here: [0, loaded) is hit KV in place
  int64_t next = 0;    // the next position to compute (prompt: all computed)
  int64_t prefill_start_ns = 0;
  // --kv-substrate rack-pool. Guarded by Prefiller::mu_: rack reads of DE-path objects into the
  // area in progress (Finish waits for them before the area may go), and `finishing`, set when
  // Finish starts (no read starts after it). rack_layers: layers whose object this PE wrote (the
  // compute thread's until the job is handed to the completer).
  int rack_reads = 0;
  bool finishing = false;
  uint32_t rack_layers = 0;
};

namespace {
uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }
}  // namespace

// The rack object of layer `layer` of `j`'s KV going `d` (both engines name it the same way).
// DE->PE objects leave the DE's xfer id out: the DE publishes them as soon as StartDecode
// returned, possibly before this engine has read the reply that carries it. Nor is the field read
// for them: Admit writes it while their notices arrive on the transfer progress thread.
RackObjectId RackId(const PeJob& j, RackDirection d, uint32_t layer) {
  return RackObjectId{d,
                      j.a.request().request_id(),
                      j.a.attempt(),
                      j.xfer_id,
                      d == RackDirection::kToDecode ? j.de_xfer_id : 0,
                      layer};
}

// The reference model's attention time per layer on one rank, as sched::PackRanks predicts it
// (the §6.2 time model, which the paper fits by profiling). Fitted once to the rank CPU times of
// ForwardLayerBatch for the default shape (4 heads of 32, dev build; docs/engine.md "Prefill
// batching"): ~55 ns per (new, cached) pair, ~14 ns per new token squared (the causal triangle,
// blocked), ~1.4 us per new token (rotary angles, KV write), scaled with the head shape. Only the
// ratios matter for balancing the ranks; the scale sets how much work the quota admits. It is
// the starting point: with calibrate_attention the PE refits the model to its own measured rank
// times (Prefiller::CalibrateAttention), since build type, CPU and load all move it.
sched::AttentionTimeModel ReferenceAttentionModel(const model::RefModelConfig& c) {
  sched::AttentionTimeModel m;
  m.per_cached_pair_ns = 0.31 * c.q_heads * (c.head_dim + 12.0);
  m.per_token_sq_ns = m.per_cached_pair_ns / 4;
  m.per_token_ns = 45.0 * c.head_dim * (c.q_heads + c.kv_heads) / 8.0;
  return m;
}

Prefiller::Prefiller(Context& ctx)
    : ctx_(ctx),
      reader_(*ctx.store, ctx.shape, ctx.options.read_depth, ctx.kv_store, ctx.rack_cache) {
  if (ctx_.options.prefill_batching == PrefillBatching::kBatched) {
    reference_model_ = ReferenceAttentionModel(ctx_.model->config());
    attention_model_ = reference_model_;
    ranks_ = std::make_unique<model::RankPool>(std::max<uint32_t>(ctx_.options.ranks, 1));
  }
  loader_ = std::thread([this] { LoaderLoop(); });
  reader_thread_ = std::thread([this] { ReaderLoop(); });
  compute_ = std::thread([this] { ComputeLoop(); });
  completer_ = std::thread([this] { CompleteLoop(); });
}

Prefiller::~Prefiller() { Stop(); }

void Prefiller::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  notice_cv_.notify_all();
  if (loader_.joinable()) {
    loader_.join();
  }
  if (reader_thread_.joinable()) {
    reader_thread_.join();
  }
  if (compute_.joinable()) {
    compute_.join();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    compute_running_ = false;
  }
  done_cv_.notify_all();
  if (completer_.joinable()) {
    completer_.join();  // finishes every job handed to it first
  }
  // Whatever is still queued was never started: fail it so the scheduler re-submits it.
  std::deque<std::shared_ptr<PeJob>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(incoming_);
    for (auto& j : loaded_) {  // every admitted job not computing (to_read_ holds a subset)
      left.push_back(j);
    }
    loaded_.clear();
    to_read_.clear();
  }
  for (auto& j : left) {
    Finish(j, Status(Code::kEngineStopped, "prefill engine stopping"));
  }
}

void Prefiller::Enqueue(const v1c::Assignment& a) {
  auto job = std::make_shared<PeJob>();
  job->a = a;
  job->plan = MakeReadPlan(a, ctx_.block_tokens);
  job->arrived.assign(ctx_.layers, false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job->seq = ++last_seq_;
    incoming_.push_back(job);
    ++unfinished_requests_;
    unfinished_tokens_ += job->plan.prompt;
    queued_read_tokens_ += job->plan.prefill_read;
  }
  queue_cv_.notify_all();
}

void Prefiller::OnNotice(const Notice& n) {
  if (ctx_.rack != nullptr && n.loaded_tokens > 0) {
    OnRackNotice(n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_xfer_.find(n.xfer_id);
    if (it == by_xfer_.end() || n.layer >= ctx_.layers) {
      log::Debug("engine {}: stray notice xfer={} layer={}", ctx_.options.name, n.xfer_id, n.layer);
      return;
    }
    PeJob& j = *it->second;
    if (!j.arrived[n.layer]) {
      j.arrived[n.layer] = true;
      ++j.arrived_count;
      j.de_loaded = static_cast<int64_t>(n.loaded_tokens);
    }
  }
  notice_cv_.notify_all();
  queue_cv_.notify_all();  // the job may have become ready to compute
}

void Prefiller::OnRackNotice(const Notice& n) {
  // The DE published layer n.layer of the hit KV it loaded ([prefill_read, + loaded)) as a rack
  // object; the notice names it. Read it into the area (on the transfer engine's progress thread:
  // a memcpy-speed copy, no compute link bytes), then count the layer in as a UCX push would.
  std::shared_ptr<PeJob> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_xfer_.find(n.xfer_id);
    if (it == by_xfer_.end() || n.layer >= ctx_.layers || it->second->finishing ||
        it->second->arrived[n.layer]) {
      log::Debug("engine {}: stray notice xfer={} layer={}", ctx_.options.name, n.xfer_id, n.layer);
      return;
    }
    job = it->second;
    ++job->rack_reads;
  }
  PeJob& j = *job;
  const ReadPlan& p = j.plan;
  Status s = Status::Ok();
  if (static_cast<int64_t>(n.loaded_tokens) > p.decode_read) {
    s = Corruption(fmt::format("request {}: DE loaded {} tokens of a {}-token share",
                               j.a.request().request_id(), n.loaded_tokens, p.decode_read));
  } else {
    const RackRange dst{j.area + (n.layer * p.prompt + p.prefill_read) * ctx_.bpt,
                        n.loaded_tokens * ctx_.bpt};
    s = ctx_.rack->Read(RackId(j, RackDirection::kToPrefill, n.layer), {&dst, 1});
    if (s.ok()) ctx_.metrics->OnRackPool(0, dst.bytes);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    --j.rack_reads;
    if (!s.ok()) {
      // Unusable DE-path KV fails the request (never wrong KV to the model); compute sees it at
      // its next wait for a layer.
      if (j.give_up.ok()) j.give_up = s;
    } else if (!j.arrived[n.layer]) {
      j.arrived[n.layer] = true;
      ++j.arrived_count;
      j.de_loaded = static_cast<int64_t>(n.loaded_tokens);
    }
  }
  notice_cv_.notify_all();
  queue_cv_.notify_all();
}

int64_t Prefiller::unfinished_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_requests_;
}
int64_t Prefiller::unfinished_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_tokens_;
}
int64_t Prefiller::queued_read_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_read_tokens_;
}

void Prefiller::UncountQueuedReadLocked(PeJob& job) {
  if (job.read_counted) {
    queued_read_tokens_ -= job.plan.prefill_read;
    job.read_counted = false;
  }
}

void Prefiller::LoaderLoop() {
  while (true) {
    std::shared_ptr<PeJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Load ahead of compute by at most prefetch_requests requests (memory bounds it too).
      queue_cv_.wait(lock, [&] {
        return stop_ || (!incoming_.empty() &&
                         loaded_.size() + computing_ <= ctx_.options.prefetch_requests);
      });
      if (stop_) {
        return;
      }
      job = incoming_.front();
      incoming_.pop_front();
    }
    Status s = Admit(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A queued PE read stays counted until the reader is done with it.
      if (!s.ok() || !job->pe_pending) {
        UncountQueuedReadLocked(*job);
      }
      if (s.ok()) {
        if (job->pe_pending) {
          to_read_.push_back(job);
        }
        loaded_.push_back(job);
      }
    }
    if (s.ok()) {
      queue_cv_.notify_all();
    } else {
      Finish(job, s);
    }
  }
}

void Prefiller::ReaderLoop() {
  while (true) {
    std::shared_ptr<PeJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queue_cv_.wait(lock, [&] { return stop_ || !to_read_.empty(); });
      if (stop_) {
        return;
      }
      job = to_read_.front();
      to_read_.pop_front();
    }
    ReadPrefillShare(*job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      UncountQueuedReadLocked(*job);
      job->pe_pending = false;
    }
    queue_cv_.notify_all();
  }
}

Status Prefiller::Admit(const std::shared_ptr<PeJob>& self) {
  PeJob& job = *self;
  const v1c::RequestSpec& r = job.a.request();
  RETURN_IF_ERROR(ValidateRequest(r, ctx_.model->config().vocab));
  ASSIGN_OR_RETURN(job.prompt_hashes, CarriedPromptHashes(job.a, *ctx_.hasher));
  const ReadPlan& p = job.plan;
  ASSIGN_OR_RETURN(job.area,
                   ctx_.arena->Allocate(ctx_.TokenBytes() * p.prompt, p.prompt, ctx_.Deadline()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The area is registered under a fresh xfer id before the DE can learn it (StartDecode), so
    // every notice for it finds the job.
    do {
      last_xfer_id_ = NextXferId(last_xfer_id_);
    } while (by_xfer_.count(last_xfer_id_) != 0);
    job.xfer_id = last_xfer_id_;
    by_xfer_.emplace(job.xfer_id, self);
  }
  // A DE this engine cannot reach over the compute network fails the request now: StartDecode
  // would wait out its deadline (the request timeout) and hold up every admission behind it.
  RETURN_IF_ERROR(ctx_.CheckPeer(job.a.decode().name(), "decode"));
  if (!p.none) {
    // Connect the transfer path first: a dead DE fails here, before it is asked to allocate.
    ASSIGN_OR_RETURN(job.de_peer, ctx_.peers->Transfer(job.a.decode().transfer_addr()));
  }
  job.de_stub = ctx_.peers->Stub(job.a.decode().peer_addr());
  v1::StartDecodeRequest req;
  *req.mutable_assignment() = job.a;
  req.set_pe_name(ctx_.options.name);
  req.set_pe_transfer_addr(ctx_.info.transfer_addr());
  req.set_pe_area_addr(Addr(job.area));
  req.set_pe_xfer_id(job.xfer_id);
  req.set_prefill_read_tokens(p.prefill_read);
  req.set_decode_read_tokens(p.decode_read);
  req.set_kv_substrate(std::string(KvSubstrateName(ctx_.options.kv_substrate)));
  v1::StartDecodeReply reply;
  grpc::ClientContext cctx;
  cctx.set_deadline(ctx_.RpcDeadline());
  PeerCall call(*ctx_.peers, job.a.decode().peer_addr(), cctx);  // the prober may end it
  job.start_sent = true;
  grpc::Status gs = job.de_stub->StartDecode(&cctx, req, &reply);
  const std::string cancelled = call.cancelled();
  // A refusal the DE itself answered leaves nothing at the DE; a lost or timed-out call may have,
  // and so may one this engine cancelled (the DE may have started it).
  const grpc::StatusCode c = gs.error_code();
  job.start_refused =
      cancelled.empty() &&
      (c == grpc::StatusCode::RESOURCE_EXHAUSTED || c == grpc::StatusCode::INVALID_ARGUMENT ||
       c == grpc::StatusCode::FAILED_PRECONDITION || c == grpc::StatusCode::CANCELLED ||
       c == grpc::StatusCode::NOT_FOUND);
  if (!gs.ok() && !cancelled.empty()) {
    return Status(Code::kEnginePeerFailed,
                  fmt::format("StartDecode at {} cancelled: {}", job.a.decode().name(), cancelled));
  }
  RETURN_IF_ERROR(FromGrpc(gs, fmt::format("StartDecode at {} ({})", job.a.decode().name(),
                                           job.a.decode().peer_addr())));
  job.de_started = true;
  job.ready_deadline = ctx_.Deadline();
  job.de_addr = reply.de_area_addr();
  job.de_stride = reply.de_layer_stride();
  job.de_xfer_id = reply.de_xfer_id();

  const uint64_t bpt = ctx_.bpt;
  if (p.none) {
    // Oracle: the hit KV is taken as zeros (a timing bound; outputs are not checked).
    for (uint32_t l = 0; l < ctx_.layers; ++l) {
      std::memset(job.area + l * p.prompt * bpt, 0, p.hit * bpt);
    }
  } else if (p.prefill_read > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    job.pe_pending = true;  // the loader queues it for the reader
  }
  return Status::Ok();
}

void Prefiller::ReadPrefillShare(PeJob& job) {
  const v1c::RequestSpec& r = job.a.request();
  const ReadPlan& p = job.plan;
  const uint64_t blocks = p.prefill_read / ctx_.block_tokens;
  const std::span<const kv::BlockHash> hashes = HashRange(job.prompt_hashes, 0, blocks);
  // The blocks stay counted in queued_read_tokens_ until the whole read is done: a ReadStream
  // shows only its in-flight blocks (<= read depth) in the store's queue, so uncounting earlier
  // would hide the rest; counting those few twice is the smaller error.
  const auto t0 = std::chrono::steady_clock::now();
  HitReadResult rr = reader_.Read(hashes, 0, job.area, p.prompt * ctx_.bpt);
  ctx_.metrics->OnRead(rr.bytes_read, SecondsSince(t0));
  job.pe_loaded = static_cast<int64_t>(rr.loaded_blocks) * ctx_.block_tokens;
  job.read_bytes = static_cast<int64_t>(rr.bytes_read);
  if (!rr.first_error.ok()) {
    log::Info("engine {}: request {} hit block {} unusable ({}); recomputing from token {}",
              ctx_.options.name, r.request_id(), rr.loaded_blocks, rr.first_error.ToString(),
              job.pe_loaded);
  }
}

std::shared_ptr<PeJob> Prefiller::TakeReadyLocked() {
  auto take = [&](std::deque<std::shared_ptr<PeJob>>::iterator it) {
    std::shared_ptr<PeJob> j = *it;
    loaded_.erase(it);
    return j;
  };
  // Oldest with all of its hit KV in place.
  for (auto it = loaded_.begin(); it != loaded_.end(); ++it) {
    const PeJob& j = **it;
    if (!j.pe_pending && (!j.plan.decode_path() || j.arrived_count == ctx_.layers)) {
      return take(it);
    }
  }
  // None complete: the oldest whose first layer is in (the rest arrive while it computes).
  for (auto it = loaded_.begin(); it != loaded_.end(); ++it) {
    const PeJob& j = **it;
    if (!j.pe_pending && j.plan.decode_path() && j.arrived[0]) {
      return take(it);
    }
  }
  return nullptr;
}

std::shared_ptr<PeJob> Prefiller::TakeStuckLocked() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = loaded_.begin(); it != loaded_.end(); ++it) {
    PeJob& j = **it;
    if (j.pe_pending || !j.plan.decode_path()) {
      continue;
    }
    if (!j.give_up.ok()) {
      // Already failed (a rack object of the DE's that could not be read): fail it now.
    } else if (!ctx_.peers->Alive(j.de_peer)) {
      j.give_up = Status(Code::kEnginePeerFailed,
                         fmt::format("decode engine {} died before the DE-path hit KV arrived",
                                     j.a.decode().name()));
    } else if (now >= j.ready_deadline) {
      j.give_up =
          Timeout(fmt::format("the DE-path hit KV from {} did not arrive", j.a.decode().name()));
    } else {
      continue;
    }
    std::shared_ptr<PeJob> job = *it;
    loaded_.erase(it);
    return job;
  }
  return nullptr;
}

void Prefiller::ComputeLoop() {
  if (ranks_ != nullptr) {
    BatchLoop();
    return;
  }
  while (true) {
    std::shared_ptr<PeJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        if ((job = TakeReadyLocked()) != nullptr) {
          break;
        }
        if (loaded_.empty()) {
          queue_cv_.wait(lock);
          continue;
        }
        // A DE that dies (or stalls) before its first notice leaves its job never ready: wake now
        // and then to find such jobs and fail them.
        queue_cv_.wait_for(lock, std::chrono::milliseconds(100));
        if ((job = TakeStuckLocked()) != nullptr) {
          break;
        }
      }
      if (stop_) {
        return;
      }
      computing_ = 1;
    }
    Status s = Compute(job);
    if (s.ok()) {
      // The puts of the last layers and PrefillDone go on while the next request computes.
      {
        std::lock_guard<std::mutex> lock(mu_);
        computed_.push_back(job);
      }
      done_cv_.notify_all();
    } else {
      Finish(job, s);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      computing_ = 0;
    }
    queue_cv_.notify_all();
  }
}

Status Prefiller::WaitLayer(PeJob& job, uint32_t layer) {
  auto deadline = ctx_.Deadline();
  std::unique_lock<std::mutex> lock(mu_);
  while (!job.arrived[layer]) {
    if (stop_) {
      return Status(Code::kEngineStopped, "prefill engine stopping");
    }
    RETURN_IF_ERROR(job.give_up);  // e.g. a rack object of the DE's that failed verification
    // Wake up now and then to notice a DE that died without a word (its notices never come).
    auto slice = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    notice_cv_.wait_until(lock, std::min(slice, deadline));
    if (job.arrived[layer]) {
      break;
    }
    if (!ctx_.peers->Alive(job.de_peer)) {
      return Status(Code::kEnginePeerFailed,
                    fmt::format("decode engine {} died before layer {} of its hit KV arrived",
                                job.a.decode().name(), layer));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Timeout(fmt::format("layer {} of the DE-path hit KV from {} did not arrive", layer,
                                 job.a.decode().name()));
    }
  }
  return Status::Ok();
}

void Prefiller::CompleteLoop() {
  while (true) {
    std::shared_ptr<PeJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Drains computed_ even when stopping: those requests are done but for their handoff.
      done_cv_.wait(lock, [&] { return !computed_.empty() || (stop_ && !compute_running_); });
      if (computed_.empty()) {
        return;
      }
      job = computed_.front();
      computed_.pop_front();
    }
    Finish(job, Complete(*job));
  }
}

Status Prefiller::WaitPuts(PeJob& job) {
  auto deadline = ctx_.Deadline();
  std::unique_lock<std::mutex> lock(mu_);
  // The transfer engine completes every batch (OK, or kTransferPeerDead after its peer timeout),
  // so this wait ends; the deadline is a second guard.
  if (!notice_cv_.wait_until(lock, deadline, [&] { return job.puts_pending == 0; })) {
    return Timeout(fmt::format("KV puts to {} did not complete", job.a.decode().name()));
  }
  return job.put_error;
}

Status Prefiller::PutLayer(const std::shared_ptr<PeJob>& job, uint32_t layer) {
  const ReadPlan& p = job->plan;
  const uint64_t bpt = ctx_.bpt;
  int64_t de_has;
  {
    std::lock_guard<std::mutex> lock(mu_);
    de_has = p.decode_read > 0 ? job->de_loaded : 0;
  }
  transfer::Batch b{
      .peer = job->de_peer, .cls = transfer::TrafficClass::kLow, .op = transfer::Op::kPut};
  const uint64_t local = Addr(job->area) + layer * p.prompt * bpt;
  const uint64_t remote = job->de_addr + layer * job->de_stride;
  // The DE lacks everything but the part of its own share it loaded: [0, prefill_read) and
  // [prefill_read + de_has, prompt).
  auto add = [&](int64_t t0, int64_t t1) {
    if (t1 > t0) {
      b.descs.push_back(
          {local + t0 * bpt, remote + t0 * bpt, static_cast<uint64_t>(t1 - t0) * bpt});
    }
  };
  add(0, p.prefill_read);
  add(p.prefill_read + de_has, p.prompt);
  if (ctx_.rack != nullptr) {
    // Rack pool substrate: the same ranges go into one published, pinned object of the rack
    // region; over the compute link only the notice that names it (a message with no data).
    std::vector<RackRange> ranges;
    uint64_t bytes = 0;
    for (const transfer::Descriptor& d : b.descs) {
      ranges.push_back({reinterpret_cast<std::byte*>(d.local_addr), d.length});
      bytes += d.length;
    }
    b.descs.clear();
    RETURN_IF_ERROR(ctx_.rack->Write(RackId(*job, RackDirection::kToDecode, layer), ranges));
    job->rack_layers = layer + 1;
    ctx_.metrics->OnRackPool(bytes, 0);
  }
  b.notify = true;
  b.notice_tag = EncodeNotice({job->de_xfer_id, layer, 0});
  b.on_complete = [this, job](const Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --job->puts_pending;
      if (!s.ok() && job->put_error.ok()) {
        job->put_error = s;
      }
    }
    notice_cv_.notify_all();
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++job->puts_pending;
  }
  const EngineMetrics::BatchSize size = EngineMetrics::SizeOf(b);  // b moves below
  Status s = ctx_.transfer->Submit(std::move(b));
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    --job->puts_pending;  // a rejected batch never calls on_complete
  } else {
    ctx_.metrics->OnTransfer(size);
  }
  return s;
}

Status Prefiller::Compute(const std::shared_ptr<PeJob>& self) {
  PeJob& job = *self;
  const v1c::RequestSpec& r = job.a.request();
  const ReadPlan& p = job.plan;
  const model::RefModel& m = *ctx_.model;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(job.give_up);
  }
  job.prefill_start_ns = RealtimeNs();  // the wait for the first layer is part of prefill
  const bool de_path = p.decode_path();
  if (de_path) {
    RETURN_IF_ERROR(WaitLayer(job, 0));
  }
  int64_t loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    BeginLocked(job);
    loaded = job.loaded;
  }

  const uint32_t hidden_dim = m.config().hidden();
  const int64_t n = p.prompt - loaded;
  std::vector<float> hidden(static_cast<size_t>(n) * hidden_dim);
  m.Embed({r.prompt().data() + loaded, static_cast<size_t>(n)}, hidden);
  for (uint32_t l = 0; l < ctx_.layers; ++l) {
    if (de_path) {
      RETURN_IF_ERROR(WaitLayer(job, l));
    }
    std::span<std::byte> layer_kv(job.area + l * p.prompt * ctx_.bpt, p.prompt * ctx_.bpt);
    m.ForwardLayer(l, static_cast<uint64_t>(loaded), layer_kv, hidden);
    if (!p.none) {
      RETURN_IF_ERROR(PutLayer(self, l));
    }
  }
  job.next = p.prompt;
  ctx_.metrics->OnPrefillBatch(1, n, {});
  std::vector<float> logits(m.config().vocab);
  m.Logits({hidden.data() + (n - 1) * hidden_dim, hidden_dim}, logits);
  FillDone(job, logits);
  return Status::Ok();
}

void Prefiller::BeginLocked(PeJob& job) {
  if (job.begun) return;
  const ReadPlan& p = job.plan;
  job.begun = true;
  if (job.prefill_start_ns == 0) job.prefill_start_ns = RealtimeNs();
  // Where recompute starts: the PE's own share stops at its first bad block; otherwise the DE's
  // share continues it as far as the DE loaded (known once its first layer arrived).
  int64_t loaded;
  if (p.none) {
    loaded = p.hit;
  } else if (job.pe_loaded < p.prefill_read) {
    loaded = job.pe_loaded;
  } else {
    loaded = p.prefill_read + (p.decode_path() ? job.de_loaded : 0);
  }
  job.loaded = std::min(loaded, p.prompt - 1);
  job.next = job.loaded;
}

void Prefiller::FillDone(PeJob& job, std::span<const float> logits) {
  v1::PrefillDoneRequest& done = job.done;
  done.set_de_xfer_id(job.de_xfer_id);
  done.set_request_id(job.a.request().request_id());
  done.set_first_token(model::RefModel::Argmax(logits));
  done.set_first_logits_digest(model::RefModel::LogitsDigest(logits));
  done.set_loaded_tokens(job.loaded);
  done.set_read_bytes_prefill(job.read_bytes);
  done.set_prefill_start_ns(job.prefill_start_ns);
  done.set_first_token_ns(RealtimeNs());
}

void Prefiller::BatchLoop() {
  // Admitted requests compute may take: PE read done and, on the DE path, the first layer in
  // (later layers are waited for layer by layer inside the batch). Admission order.
  auto takeable = [&](const PeJob& j) {
    return !j.pe_pending && (!j.plan.decode_path() || j.arrived[0]);
  };
  std::vector<std::shared_ptr<PeJob>> cands, jobs;
  std::vector<sched::PrefillWork> work;
  sched::BatchLimits limits;
  limits.compute_quota = ctx_.options.compute_quota;
  limits.min_chunk_tokens = ctx_.options.min_chunk_tokens;
  sched::BatchPlan plan;
  while (true) {
    std::shared_ptr<PeJob> stuck;
    Status planned;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        cands.clear();
        for (const auto& j : loaded_) {
          if (takeable(*j)) cands.push_back(j);
        }
        if (!cands.empty()) break;
        if (loaded_.empty()) {
          queue_cv_.wait(lock);
          continue;
        }
        // As in the serial loop: a DE that dies (or stalls) before its first notice leaves its
        // job never takeable; look for such jobs now and then.
        queue_cv_.wait_for(lock, std::chrono::milliseconds(100));
        if ((stuck = TakeStuckLocked()) != nullptr) break;
      }
      if (stop_) {
        return;
      }
      if (stuck == nullptr) {
        work.clear();
        for (const auto& j : cands) {
          BeginLocked(*j);
          work.push_back({j->next, j->plan.prompt - j->next});
        }
        planned = sched::PackRanks(work, attention_model_, limits, ranks_->ranks(),
                                   ctx_.options.rank_placement, &plan);
        jobs.clear();
        if (planned.ok()) {
          for (const sched::BatchEntry& e : plan.entries) jobs.push_back(cands[e.index]);
        } else {
          jobs.push_back(cands[0]);  // fail the head (cannot happen without a KV limit)
        }
        for (const auto& j : jobs) loaded_.erase(std::find(loaded_.begin(), loaded_.end(), j));
        computing_ += jobs.size();
      }
    }
    if (stuck != nullptr) {
      Finish(stuck, stuck->give_up);
      continue;
    }
    if (!planned.ok()) {
      Finish(jobs[0], planned);
    } else {
      RunBatch(jobs, plan);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      computing_ -= jobs.size();
    }
    queue_cv_.notify_all();
  }
}

void Prefiller::RunBatch(std::vector<std::shared_ptr<PeJob>>& jobs, const sched::BatchPlan& plan) {
  const model::RefModel& m = *ctx_.model;
  const size_t h = m.config().hidden();
  const uint64_t bpt = ctx_.bpt;
  struct Item {
    std::shared_ptr<PeJob> job;
    int64_t start = 0;
    int64_t n = 0;
    uint32_t rank = 0;
    bool last = false;  // the request's last chunk
    Status status;
  };
  std::vector<Item> items;
  std::vector<Item> failed;
  int64_t tokens = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const sched::BatchEntry& e = plan.entries[k];
    PeJob& j = *jobs[k];
    items.push_back({jobs[k], j.next, e.bsz, e.rank, j.next + e.bsz == j.plan.prompt, {}});
    tokens += e.bsz;
  }
  // The rows of every chunk, in item order.
  std::vector<float> hidden(static_cast<size_t>(tokens) * h);
  {
    size_t row = 0;
    for (const Item& it : items) {
      const auto& prompt = it.job->a.request().prompt();
      m.Embed({prompt.data() + it.start, static_cast<size_t>(it.n)},
              std::span<float>(hidden).subspan(row * h, static_cast<size_t>(it.n) * h));
      row += static_cast<size_t>(it.n);
    }
  }
  // A chunk that fails (its DE died, a put was refused, the engine stops) leaves the batch: its
  // rows are cut out and the rest go on.
  auto drop_failed = [&] {
    std::vector<Item> kept;
    std::vector<float> rows;
    size_t row = 0;
    for (Item& it : items) {
      const size_t n = static_cast<size_t>(it.n);
      if (it.status.ok()) {
        rows.insert(rows.end(), hidden.begin() + row * h, hidden.begin() + (row + n) * h);
        kept.push_back(std::move(it));
      } else {
        failed.push_back(std::move(it));
      }
      row += n;
    }
    items = std::move(kept);
    hidden = std::move(rows);
  };
  const uint32_t ranks = ranks_->ranks();
  std::vector<int64_t> rank_ns(ranks, 0);
  std::vector<model::RefModel::BatchSeq> seqs;
  for (uint32_t l = 0; l < ctx_.layers; ++l) {
    bool any_failed = false;
    for (Item& it : items) {
      if (it.job->plan.decode_path()) {
        it.status = WaitLayer(*it.job, l);
        any_failed = any_failed || !it.status.ok();
      }
    }
    if (any_failed) drop_failed();
    seqs.clear();
    for (const Item& it : items) {
      PeJob& j = *it.job;
      std::span<std::byte> layer_kv(j.area + l * j.plan.prompt * bpt,
                                    static_cast<size_t>(it.start + it.n) * bpt);
      seqs.push_back(
          {static_cast<uint64_t>(it.start), static_cast<uint64_t>(it.n), layer_kv, it.rank});
    }
    m.ForwardLayerBatch(l, seqs, hidden, *ranks_, rank_ns);
    any_failed = false;
    for (Item& it : items) {
      if (it.last && !it.job->plan.none) {
        it.status = PutLayer(it.job, l);
        any_failed = any_failed || !it.status.ok();
      }
    }
    if (any_failed) drop_failed();
  }
  if (failed.empty()) {
    // Every chunk ran all layers: the measured rank times belong to exactly the planned work.
    std::vector<sched::RankWork> work(ranks);
    for (const Item& it : items) work[it.rank].Add(it.start, it.n);
    CalibrateAttention(work, rank_ns, jobs.size(), tokens);
  } else {
    ctx_.metrics->OnPrefillBatch(jobs.size(), tokens, rank_ns);
  }

  // Finished requests: the logits of their last token, then the completer hands them off.
  std::vector<float> logits(m.config().vocab);
  std::vector<std::shared_ptr<PeJob>> done, again;
  size_t row = 0;
  for (Item& it : items) {
    PeJob& j = *it.job;
    row += static_cast<size_t>(it.n);
    j.next = it.start + it.n;
    if (!it.last) {
      again.push_back(it.job);
      continue;
    }
    m.Logits(std::span<const float>(hidden).subspan((row - 1) * h, h), logits);
    FillDone(j, logits);
    done.push_back(it.job);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& j : done) computed_.push_back(j);
    // A chunked request goes back in admission order: the next batch continues it first.
    for (auto& j : again) {
      auto at = std::find_if(loaded_.begin(), loaded_.end(),
                             [&](const std::shared_ptr<PeJob>& o) { return o->seq > j->seq; });
      loaded_.insert(at, j);
    }
  }
  if (!done.empty()) done_cv_.notify_all();
  for (Item& it : failed) Finish(it.job, it.status);
}

void Prefiller::CalibrateAttention(std::span<const sched::RankWork> work,
                                   std::span<const int64_t> rank_ns, size_t requests,
                                   int64_t tokens) {
  // The models predict one layer; the ranks were measured over all of them.
  const double layers = static_cast<double>(ctx_.layers);
  std::vector<double> planned(work.size()), reference(work.size());
  for (size_t r = 0; r < work.size(); ++r) {
    planned[r] = work[r].PredictNs(attention_model_) * layers;
    reference[r] = work[r].PredictNs(reference_model_) * layers;
  }
  ctx_.metrics->OnPrefillBatch(requests, tokens, rank_ns, planned, reference);
  for (size_t r = 0; r < work.size(); ++r) {
    attention_fit_.Add(work[r], static_cast<double>(rank_ns[r]) / layers);
  }
  // A fit that is degenerate so far (too few, too similar samples) keeps the model in use.
  sched::AttentionTimeModel fitted;
  if (ctx_.options.calibrate_attention && attention_fit_.samples() >= kMinFitSamples &&
      attention_fit_.Fit(&fitted)) {
    attention_model_ = fitted;
  }
  ctx_.metrics->OnAttentionModel(attention_model_,
                                 ctx_.options.calibrate_attention ? attention_fit_.samples() : 0);
}

Status Prefiller::Complete(PeJob& job) {
  RETURN_IF_ERROR(WaitPuts(job));
  RETURN_IF_ERROR(ctx_.CheckPeer(job.a.decode().name(), "decode"));
  v1::PrefillDoneReply reply;
  grpc::ClientContext cctx;
  cctx.set_deadline(ctx_.RpcDeadline());
  PeerCall call(*ctx_.peers, job.a.decode().peer_addr(), cctx);
  grpc::Status gs = job.de_stub->PrefillDone(&cctx, job.done, &reply);
  if (!gs.ok() && !call.cancelled().empty()) {
    return Status(Code::kEnginePeerFailed, fmt::format("PrefillDone at {} cancelled: {}",
                                                       job.a.decode().name(), call.cancelled()));
  }
  return FromGrpc(gs, fmt::format("PrefillDone at {}", job.a.decode().name()));
}

bool Prefiller::ReleaseDe(PeJob& j, const Status& why) {
  v1::AbortDecodeRequest abort;
  abort.set_de_xfer_id(j.de_xfer_id);
  abort.set_request_id(j.a.request().request_id());
  abort.set_reason(why.ToString());
  abort.set_attempt(j.a.attempt());
  v1::AbortDecodeReply reply;
  grpc::Status s;
  if (Status reach = ctx_.CheckPeer(j.a.decode().name(), "decode"); !reach.ok()) {
    // Let go of (partitioned): the call would only wait out its deadline. The prober disconnects
    // the DE's transfer peers, after which nothing of it can land in the area (checked below).
    s = grpc::Status(grpc::StatusCode::UNAVAILABLE, reach.ToString());
  } else {
    grpc::ClientContext cctx;
    cctx.set_deadline(ctx_.RpcDeadline());
    PeerCall call(*ctx_.peers, j.a.decode().peer_addr(), cctx);
    s = j.de_stub->AbortDecode(&cctx, abort, &reply);
  }
  // In the rack-pool substrate the DE never writes into the area (this engine reads its objects,
  // and Finish stops and waits for those reads).
  const bool de_pushes = j.plan.decode_path() && ctx_.rack == nullptr;
  const std::string& de = j.a.decode().name();
  const bool gone = ctx_.prober != nullptr && ctx_.prober->Gone(de);
  // Nothing of the DE's can land in the area any more: for a DE let go of (partitioned), once
  // the prober has disconnected its transfer peers both ways (it pushes over its own connection,
  // not ours); otherwise once the transfer engine declared it dead.
  auto quiet = [&] { return gone ? ctx_.prober->Released(de) : !ctx_.peers->Alive(j.de_peer); };
  if (!j.de_started && !s.ok() && !gone) {
    // StartDecode never answered and the DE does not answer now either; if it is alive it may
    // still start pushing, so only a dead DE makes the area safe.
    return !de_pushes || quiet();
  }
  if (!de_pushes || (s.ok() && reply.quiesced())) {
    return true;  // nothing of the DE's can still land in the area
  }
  // No word from the DE: it may still be pushing its share into the area. Safe once every layer
  // arrived or the DE is gone; otherwise the caller leaks the area.
  auto deadline = ctx_.Deadline();
  std::unique_lock<std::mutex> lock(mu_);
  while (j.arrived_count < ctx_.layers) {
    if (quiet()) {
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    notice_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                       std::chrono::milliseconds(100)));
  }
  return true;
}

void Prefiller::Finish(const std::shared_ptr<PeJob>& job, Status status) {
  PeJob& j = *job;
  bool safe_to_free = true;
  if (ctx_.rack != nullptr) {
    {
      // No rack read into the area starts from here on; wait out those in progress (each is
      // bounded by the region's lock timeout).
      std::unique_lock<std::mutex> lock(mu_);
      j.finishing = true;
      notice_cv_.wait(lock, [&] { return j.rack_reads == 0; });
    }
    // The DE has read our objects (its PrefillDone answer waits for that) or the request failed:
    // either way they go (one the DE still pins is left to LRU eviction).
    for (uint32_t l = 0; l < j.rack_layers; ++l) {
      ctx_.rack->Release(RackId(j, RackDirection::kToDecode, l));
    }
    j.rack_layers = 0;
  }
  if (!status.ok()) {
    log::Warn("engine {}: request {} failed: {}", ctx_.options.name, j.a.request().request_id(),
              status.ToString());
    if (j.area != nullptr) {
      // Our own puts read the area: wait for them (the transfer engine completes or fails each).
      Status puts = WaitPuts(j);
      if (!puts.ok() && puts.code() == Code::kTimeout) {
        safe_to_free = false;
      }
      if (j.start_sent && !j.start_refused && !ReleaseDe(j, status)) {
        safe_to_free = false;
      }
    }
    ctx_.metrics->OnFailed(status);
    Status rs = ctx_.scheduler->ReportResult(FailedResult(j.a, status));
    if (!rs.ok()) {
      log::Warn("engine {}: reporting failed request {}: {}", ctx_.options.name,
                j.a.request().request_id(), rs.ToString());
    }
  }
  if (j.area != nullptr) {
    if (safe_to_free) {
      ctx_.arena->Free(j.area);
    } else {
      // Leaking beats corrupting a later request's KV; the engine's free memory shrinks and the
      // scheduler sees it in hbm_free_tokens.
      log::Error("engine {}: request {} area leaked: a peer may still write into it",
                 ctx_.options.name, j.a.request().request_id());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  UncountQueuedReadLocked(j);
  if (j.xfer_id != 0) {
    by_xfer_.erase(j.xfer_id);
  }
  --unfinished_requests_;
  unfinished_tokens_ -= j.plan.prompt;
}

}  // namespace dualpath::engine
