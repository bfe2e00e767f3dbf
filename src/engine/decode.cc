#include "engine/decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/model/rank_pool.h"

namespace dualpath::engine {

namespace v1c = control::v1;
using SteadyTime = std::chrono::steady_clock::time_point;

struct DeReq {
  v1c::Assignment a;
  ReadPlan plan;
  std::vector<kv::BlockHash> prompt_hashes;  // a.prompt_block_hashes, checked by StartDecode
  int64_t capacity = 0;       // tokens per layer in the DE buffer: prompt + gen_tokens
  std::byte* area = nullptr;  // [layers][capacity][bpt]
  uint64_t stride = 0;        // capacity * bpt
  uint32_t xfer_id = 0;
  std::string pe_name;
  std::string pe_transfer_addr;
  uint64_t pe_area_addr = 0;
  uint32_t pe_xfer_id = 0;
  // Guarded by Decoder::mu_.
  uint32_t expected = 0;  // PE layer notices to wait for
  uint32_t arrived = 0;
  std::vector<bool> seen;
  bool done_in = false;
  v1::PrefillDoneRequest done;
  int puts_pending = 0;
  bool reading = false;  // queued for, or in, the reader stage: the area is being written
  bool queued = false;   // ready or decoding: the decode stage owns it
  bool aborted = false;
  bool push_failed = false;  // a push to the PE failed: the attempt was reported failed
  // Incomplete past its deadline: PrefillDone is refused, but the buffer is held (quarantined)
  // until the PE can no longer put into it (see ReapLocked).
  bool expired = false;
  int64_t de_loaded = 0;
  int64_t read_bytes = 0;
  int64_t ready_ns = 0;  // wall clock when it became ready to decode (Timing.decode_ready_ns)
  SteadyTime deadline;
  // --kv-substrate rack-pool, guarded by Decoder::mu_: reads of the PE's rack objects into the
  // buffer in progress (the buffer is not freed while any is), the first that failed (PrefillDone
  // is then refused: never wrong KV to decode), and the layers whose DE-path object this engine
  // wrote (released once the PE has them: its PrefillDone, or when the request goes).
  int rack_reads = 0;
  Status rack_error;
  uint32_t rack_layers = 0;
};

namespace {
uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// The rack object of layer `layer` of `r`'s KV going `d` (both engines name it the same way;
// DE->PE objects without this engine's xfer id, which the PE may not have read yet).
RackObjectId RackId(const DeReq& r, RackDirection d, uint32_t layer) {
  return RackObjectId{d,
                      r.a.request().request_id(),
                      r.a.attempt(),
                      r.pe_xfer_id,
                      d == RackDirection::kToDecode ? r.xfer_id : 0,
                      layer};
}

storage::WriteBehindOptions WriteBehindFor(const EngineOptions& options, KvStoreLink* kv_store,
                                           RackLink* rack, std::function<void()> on_space) {
  storage::WriteBehindOptions o;
  if (kv_store != nullptr || rack != nullptr) {
    // Every block persisted to the node's tier also goes to the distributed store and to the rack
    // prefix cache (its file image: readers verify it as a file read). On the write-behind's
    // thread, off the decode path, and before FlushTo returns: a result is reported only after
    // its blocks are written, so the agent's next turn finds them in the rack.
    o.after_write = [kv_store, rack](std::span<const storage::EncodedBlock> blocks,
                                     std::span<const Status> results) {
      if (kv_store != nullptr) kv_store->Put(blocks, results);
      if (rack == nullptr) return;
      for (const storage::EncodedBlock& b : blocks) {
        // Published whatever the tier's write did: the rack copy is verified on every read, and
        // a block the tier failed to keep is then still a rack hit instead of a recompute.
        Status s = rack->PublishBlock(b.hash, b.file.span().first(b.file_bytes));
        if (!s.ok()) log::Debug("engine: rack prefix cache: {}", s.ToString());
      }
    };
  }
  o.max_queued_bytes = options.write_behind_bytes;
  // Never wait in Submit: a full queue refuses, and the decode thread keeps the refused block in
  // its request's buffer and offers it again when on_space says bytes were freed (DecodeLoop).
  // Dropping it instead would make it a miss (a recompute) on the agent's next turn; waiting would
  // hold every request of the step batch (docs/engine.md "Decode batching").
  o.block_when_full = false;
  o.on_space = std::move(on_space);
  return o;
}

// Blocks queued per step boundary while requests are decoding: encoding a block (a copy and a
// checksum pass on the decode thread) delays the next step, so a burst (16 first turns joining at
// once bring ~370 new blocks) is spread over steps. The storage link drains ~100 blocks/s of 512
// KiB and steps take milliseconds, so this never limits what the link gets.
constexpr int kQueuedBlocksPerStep = 8;
}  // namespace

struct Decoder::Active {
  std::shared_ptr<DeReq> r;
  v1::PrefillDoneRequest done;
  // The computed positions' tokens: the prompt, then the teacher tokens fed to decode steps.
  std::vector<uint32_t> tokens;
  std::vector<kv::BlockHash> hashes;  // of every full block of `tokens`
  int64_t full_blocks = 0;
  int64_t first_write = 0;  // first full block not loaded: from it on, every block is queued
  int64_t next_write = 0;   // first full block not yet queued for write-behind (or loaded)
  int64_t computed = 0;     // positions [0, computed) have their KV in the buffer
  std::vector<uint32_t> generated;
  uint32_t next_step = 1;  // generated token index the next step produces; done at gen_tokens
  int64_t ready_ns = 0;    // DeReq::ready_ns
  int64_t start_ns = 0;    // taken into decode (BeginDecode)
  int64_t second_token_ns = 0;
  int64_t done_ns = 0;      // its last step ran (retired; reported once its blocks are queued)
  uint32_t rank = 0;        // its attention rank (Decoder::ranks_), chosen when it joined
  int64_t rank_tokens = 0;  // what it adds to rank_tokens_[rank]: prompt + gen_tokens
};

uint32_t DecodeRankFor(std::span<const int64_t> rank_tokens) {
  DUALPATH_CHECK(!rank_tokens.empty(), "DecodeRankFor: no ranks");
  return static_cast<uint32_t>(std::min_element(rank_tokens.begin(), rank_tokens.end()) -
                               rank_tokens.begin());
}

Decoder::Decoder(Context& ctx)
    : ctx_(ctx),
      reader_(*ctx.store, ctx.shape, ctx.options.read_depth, ctx.kv_store, ctx.rack_cache),
      write_behind_(*ctx.store, WriteBehindFor(ctx.options, ctx.kv_store, ctx.rack_cache,
                                               [this] { OnWriteSpace(); })) {
  if (ctx.options.decode_batching == DecodeBatching::kContinuous && ctx.options.ranks > 1) {
    ranks_ = std::make_unique<model::RankPool>(ctx.options.ranks);
    rank_tokens_.assign(ctx.options.ranks, 0);
    rank_ns_.assign(ctx.options.ranks, 0);
  }
  reader_thread_ = std::thread([this] { ReaderLoop(); });
  decode_thread_ = std::thread([this] { DecodeLoop(); });
  report_thread_ = std::thread([this] { ReportLoop(); });
}

Decoder::~Decoder() { Stop(); }

void Decoder::OnWriteSpace() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    write_space_ = true;
  }
  cv_.notify_all();
}

void Decoder::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (reader_thread_.joinable()) {
    reader_thread_.join();
  }
  if (decode_thread_.joinable()) {
    decode_thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    decode_running_ = false;
  }
  report_cv_.notify_all();
  if (report_thread_.joinable()) {
    report_thread_.join();  // reports every decoded result first
  }
  write_behind_.Close();
}

int64_t Decoder::unfinished_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(reqs_.size());
}
int64_t Decoder::unfinished_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_tokens_;
}
int64_t Decoder::queued_read_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_read_tokens_;
}

Result<v1::StartDecodeReply> Decoder::StartDecode(const v1::StartDecodeRequest& req,
                                                  const std::function<bool()>& cancelled) {
  const v1c::RequestSpec& spec = req.assignment().request();
  RETURN_IF_ERROR(ValidateRequest(spec, ctx_.model->config().vocab));
  const std::string_view substrate =
      req.kv_substrate().empty() ? std::string_view("ucx") : std::string_view(req.kv_substrate());
  if (substrate != KvSubstrateName(ctx_.options.kv_substrate)) {
    return InvalidArgument(fmt::format("request {}: PE {} moves KV by {}, this engine by {}",
                                       spec.request_id(), req.pe_name(), substrate,
                                       KvSubstrateName(ctx_.options.kv_substrate)));
  }
  ASSIGN_OR_RETURN(std::vector<kv::BlockHash> prompt_hashes,
                   CarriedPromptHashes(req.assignment(), *ctx_.hasher));
  auto r = std::make_shared<DeReq>();
  r->a = req.assignment();
  r->prompt_hashes = std::move(prompt_hashes);
  r->plan = MakeReadPlan(r->a, ctx_.block_tokens);
  // The PE's normalized split is authoritative (both sides must agree on who has what).
  const int64_t bt = ctx_.block_tokens;
  if (!r->plan.none) {
    int64_t pr = req.prefill_read_tokens(), dr = req.decode_read_tokens();
    if (pr < 0 || dr < 0 || pr % bt != 0 || dr % bt != 0 || pr + dr > r->plan.hit) {
      return InvalidArgument(
          fmt::format("request {}: read split {}+{} tokens does not fit hit {} in blocks of {}",
                      spec.request_id(), pr, dr, r->plan.hit, bt));
    }
    r->plan.prefill_read = pr;
    r->plan.decode_read = dr;
  }
  r->capacity = r->plan.prompt + spec.gen_tokens();
  r->stride = static_cast<uint64_t>(r->capacity) * ctx_.bpt;
  r->pe_name = req.pe_name();
  r->pe_transfer_addr = req.pe_transfer_addr();
  r->pe_area_addr = req.pe_area_addr();
  r->pe_xfer_id = req.pe_xfer_id();
  r->expected = r->plan.none ? 0 : ctx_.layers;
  r->seen.assign(ctx_.layers, false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      return Status(Code::kEngineStopped, "decode engine stopping");
    }
  }
  ASSIGN_OR_RETURN(
      r->area,
      ctx_.arena->Allocate(ctx_.TokenBytes() * r->capacity, r->capacity,
                           // Half the PE's RPC deadline: answer (refuse) while the PE still waits.
                           std::chrono::steady_clock::now() +
                               std::chrono::nanoseconds(ctx_.options.request_timeout / 2)));
  if (cancelled()) {
    // The PE gave up waiting (its deadline passed while this waited for memory): it will never
    // send PrefillDone, and pushing into its area could hit memory it has reused.
    ctx_.arena->Free(r->area);
    return Status(Code::kCancelled,
                  fmt::format("request {}: StartDecode cancelled by the PE", spec.request_id()));
  }
  v1::StartDecodeReply reply;
  {
    std::lock_guard<std::mutex> lock(mu_);
    do {
      last_xfer_id_ = NextXferId(last_xfer_id_);
    } while (reqs_.count(last_xfer_id_) != 0);
    r->xfer_id = last_xfer_id_;
    r->deadline = ctx_.Deadline();
    reqs_.emplace(r->xfer_id, r);
    unfinished_tokens_ += r->capacity;
    if (r->plan.decode_path()) {
      r->reading = true;
      to_read_.push_back(r);
      queued_read_tokens_ += r->plan.decode_read;
    }
  }
  cv_.notify_all();
  reply.set_de_area_addr(Addr(r->area));
  reply.set_de_layer_stride(r->stride);
  reply.set_de_xfer_id(r->xfer_id);
  return reply;
}

Status Decoder::PrefillDone(const v1::PrefillDoneRequest& req) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = reqs_.find(req.de_xfer_id());
    if (it == reqs_.end() || it->second->a.request().request_id() != req.request_id() ||
        it->second->aborted) {
      return NotFound(fmt::format("request {} (xfer {}) is not waiting here", req.request_id(),
                                  req.de_xfer_id()));
    }
    // A copy: the rack-pool wait below releases the lock, and the map may change meanwhile.
    const std::shared_ptr<DeReq> r = it->second;
    if (r->expired) {
      // The PE sends PrefillDone only once its puts into the buffer completed: nothing of it can
      // land there any more, so the quarantined buffer may go (the reaper frees it).
      r->aborted = true;
      cv_.notify_all();
      return NotFound(fmt::format("request {} (xfer {}) timed out here waiting for its PE",
                                  req.request_id(), req.de_xfer_id()));
    }
    if (ctx_.rack != nullptr) {
      // The PE deletes its rack objects once this call succeeds, and the layer notices travel
      // apart from it: answer only when every layer was read into the buffer (or could not be).
      auto have_all = [&] {
        return r->aborted || r->expired || !r->rack_error.ok() ||
               (r->arrived >= r->expected && r->rack_reads == 0);
      };
      if (!cv_.wait_until(lock, ctx_.Deadline(), have_all)) {
        return Timeout(
            fmt::format("request {}: the PE's rack objects were not all read", req.request_id()));
      }
      if (r->aborted || r->expired) {
        return NotFound(
            fmt::format("request {} (xfer {}) was aborted", req.request_id(), req.de_xfer_id()));
      }
      RETURN_IF_ERROR(r->rack_error);
      // The PE computed, so it has read every DE-path object of ours: they can go.
      ReleaseRackLocked(*r);
    }
    r->done = req;
    r->done_in = true;
    r->deadline = ctx_.Deadline();
    MaybeReadyLocked(r);
  }
  cv_.notify_all();
  return Status::Ok();
}

void Decoder::ReleaseRackLocked(DeReq& r) {
  if (ctx_.rack == nullptr) return;
  for (uint32_t l = 0; l < r.rack_layers; ++l) {
    ctx_.rack->Release(RackId(r, RackDirection::kToPrefill, l));
  }
  r.rack_layers = 0;
}

Result<v1::AbortDecodeReply> Decoder::AbortDecode(const v1::AbortDecodeRequest& req) {
  v1::AbortDecodeReply reply;
  std::unique_lock<std::mutex> lock(mu_);
  std::shared_ptr<DeReq> r;
  for (const auto& [xfer, q] : reqs_) {
    if ((req.de_xfer_id() == 0 || req.de_xfer_id() == xfer) &&
        q->a.request().request_id() == req.request_id() && q->a.attempt() == req.attempt()) {
      r = q;
      break;
    }
  }
  if (r == nullptr) {
    reply.set_quiesced(true);  // already gone (or never started): nothing of it is in flight
    return reply;
  }
  if (!r->queued) {
    r->aborted = true;
  }
  // Not yet picked up by the reader: drop it from the queue instead of waiting for its turn.
  auto queued_at = std::find(to_read_.begin(), to_read_.end(), r);
  if (queued_at != to_read_.end()) {
    to_read_.erase(queued_at);
    queued_read_tokens_ -= r->plan.decode_read;
    r->reading = false;
  }
  log::Info("engine {}: request {} aborted by its PE: {}", ctx_.options.name, req.request_id(),
            req.reason());
  cv_.notify_all();
  // The reader checks `aborted` before every layer it pushes, so this ends once the current
  // storage read (if any) and the pushes already posted complete.
  bool quiet =
      cv_.wait_until(lock, ctx_.Deadline(), [&] { return !r->reading && r->puts_pending == 0; });
  reply.set_quiesced(quiet);
  return reply;
}

void Decoder::OnNotice(const Notice& n) {
  if (ctx_.rack != nullptr) {
    OnRackNotice(n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reqs_.find(n.xfer_id);
    if (it == reqs_.end() || n.layer >= ctx_.layers) {
      log::Debug("engine {}: stray notice xfer={} layer={}", ctx_.options.name, n.xfer_id, n.layer);
      return;
    }
    auto& r = it->second;
    if (!r->seen[n.layer]) {
      r->seen[n.layer] = true;
      ++r->arrived;
      MaybeReadyLocked(r);
    }
  }
  cv_.notify_all();
}

void Decoder::OnRackNotice(const Notice& n) {
  // The PE published layer n.layer of the KV this engine lacks as a rack object; the notice names
  // it. Read it into the buffer (on the transfer engine's progress thread: a memcpy-speed copy, no
  // compute link bytes), then count the layer in as a UCX put's notice would.
  std::shared_ptr<DeReq> r;
  int64_t de_has = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reqs_.find(n.xfer_id);
    if (it == reqs_.end() || n.layer >= ctx_.layers || it->second->aborted || it->second->expired ||
        it->second->seen[n.layer]) {
      log::Debug("engine {}: stray notice xfer={} layer={}", ctx_.options.name, n.xfer_id, n.layer);
      return;
    }
    r = it->second;
    ++r->rack_reads;
    de_has = r->plan.decode_read > 0 ? r->de_loaded : 0;
  }
  // The PE's ranges (PutLayer): everything but the part of this engine's share it loaded.
  const ReadPlan& p = r->plan;
  std::byte* layer = r->area + n.layer * r->stride;
  RackRange dst[2];
  size_t k = 0;
  if (p.prefill_read > 0) dst[k++] = {layer, static_cast<uint64_t>(p.prefill_read) * ctx_.bpt};
  if (p.prompt > p.prefill_read + de_has) {
    dst[k++] = {layer + (p.prefill_read + de_has) * ctx_.bpt,
                static_cast<uint64_t>(p.prompt - p.prefill_read - de_has) * ctx_.bpt};
  }
  Status s = ctx_.rack->Read(RackId(*r, RackDirection::kToDecode, n.layer), {dst, k});
  if (s.ok()) ctx_.metrics->OnRackPool(0, dst[0].bytes + (k > 1 ? dst[1].bytes : 0));
  {
    std::lock_guard<std::mutex> lock(mu_);
    --r->rack_reads;
    if (!s.ok()) {
      log::Warn("engine {}: request {} layer {}: {}", ctx_.options.name,
                r->a.request().request_id(), n.layer, s.ToString());
      if (r->rack_error.ok()) r->rack_error = s;
    } else if (!r->seen[n.layer]) {
      r->seen[n.layer] = true;
      ++r->arrived;
      MaybeReadyLocked(r);
    }
  }
  cv_.notify_all();
}

void Decoder::MaybeReadyLocked(const std::shared_ptr<DeReq>& r) {
  // The PE sends PrefillDone after its puts completed, but the notices travel on the transfer
  // path and may arrive after the RPC: decode starts when both are in.
  if (!r->aborted && !r->queued && r->done_in && r->arrived >= r->expected) {
    r->queued = true;
    r->ready_ns = RealtimeNs();
    ready_.push_back(r);
  }
}

void Decoder::ReaderLoop() {
  while (true) {
    std::shared_ptr<DeReq> r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !to_read_.empty(); });
      if (stop_) {
        return;
      }
      r = to_read_.front();
      to_read_.pop_front();
    }
    ReadAndPush(r);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Counted until the read is done: the store's queue shows only the in-flight blocks of a
      // stream (<= read depth), so counting those twice beats hiding the rest.
      queued_read_tokens_ -= r->plan.decode_read;
      r->reading = false;
      r->deadline = ctx_.Deadline();
    }
    cv_.notify_all();
  }
}

void Decoder::ReadAndPush(const std::shared_ptr<DeReq>& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (r->aborted) {
      return;
    }
  }
  const v1c::RequestSpec& spec = r->a.request();
  const ReadPlan& p = r->plan;
  const int64_t bt = ctx_.block_tokens;
  const uint64_t first_block = p.prefill_read / bt;
  const std::span<const kv::BlockHash> hashes =
      HashRange(r->prompt_hashes, first_block, p.decode_read / bt);
  const auto t0 = std::chrono::steady_clock::now();
  HitReadResult rr = reader_.Read(hashes, first_block, r->area, r->stride);
  ctx_.metrics->OnRead(rr.bytes_read, SecondsSince(t0));
  const int64_t loaded = static_cast<int64_t>(rr.loaded_blocks) * bt;
  if (!rr.first_error.ok()) {
    log::Info("engine {}: request {} hit block {} unusable ({}); the PE recomputes from token {}",
              ctx_.options.name, spec.request_id(), first_block + rr.loaded_blocks,
              rr.first_error.ToString(), p.prefill_read + loaded);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    r->de_loaded = loaded;
    r->read_bytes = static_cast<int64_t>(rr.bytes_read);
  }
  // A PE this engine cannot reach over the compute network: say so at once instead of trying to
  // connect (which would hold this reader, and every DE-path read behind it, for the connect's
  // deadline).
  Status reach = ctx_.CheckPeer(r->a.prefill().name(), "prefill");
  Result<transfer::PeerId> pe =
      reach.ok() ? ctx_.peers->Transfer(r->pe_transfer_addr) : Result<transfer::PeerId>(reach);
  if (!pe.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      PushFailedLocked(*r, pe.status().WithContext("cannot reach PE " + r->pe_name));
      r->aborted = !r->queued;
    }
    report_cv_.notify_all();
    return;
  }
  const uint64_t bpt = ctx_.bpt;
  // With nothing loaded one token still travels (its bytes are never used: the PE recomputes
  // from there), because the notice rides on a non-empty batch.
  const uint64_t send_tokens = static_cast<uint64_t>(std::max<int64_t>(loaded, 1));
  for (uint32_t l = 0; l < ctx_.layers; ++l) {
    transfer::Batch b{.peer = *pe, .cls = transfer::TrafficClass::kLow, .op = transfer::Op::kPut};
    if (ctx_.rack == nullptr) {
      b.descs.push_back({Addr(r->area) + l * r->stride + p.prefill_read * bpt,
                         r->pe_area_addr + l * p.prompt * bpt + p.prefill_read * bpt,
                         send_tokens * bpt});
    } else if (loaded > 0) {
      // Rack pool substrate: the loaded share of this layer becomes one published, pinned rack
      // object; the notice alone (no data) names it. Nothing loaded: no object, the notice says 0.
      const RackRange src{r->area + l * r->stride + p.prefill_read * bpt,
                          static_cast<uint64_t>(loaded) * bpt};
      Status w = ctx_.rack->Write(RackId(*r, RackDirection::kToPrefill, l), {&src, 1});
      if (!w.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          PushFailedLocked(*r, w.WithContext(fmt::format("rack object of layer {}", l)));
          r->aborted = !r->queued;
        }
        report_cv_.notify_all();
        return;
      }
      ctx_.metrics->OnRackPool(src.bytes, 0);
      std::lock_guard<std::mutex> lock(mu_);
      r->rack_layers = l + 1;
    }
    b.notify = true;
    b.notice_tag = EncodeNotice({r->pe_xfer_id, l, static_cast<uint64_t>(loaded)});
    b.on_complete = [this, r](const Status& s) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        --r->puts_pending;
        if (!s.ok()) {
          // The PE is gone or unreachable (a link down longer than the transfer engine's peer
          // timeout): drop our side, and say so, since the PE may never learn it (see
          // PushFailedLocked).
          r->aborted = r->aborted || !r->queued;
          PushFailedLocked(*r, s.WithContext("push to PE " + r->pe_name));
        }
      }
      cv_.notify_all();
      report_cv_.notify_all();
    };
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r->aborted) {
        return;
      }
      ++r->puts_pending;
    }
    const EngineMetrics::BatchSize size = EngineMetrics::SizeOf(b);  // b moves below
    Status s = ctx_.transfer->Submit(std::move(b));
    if (s.ok()) ctx_.metrics->OnTransfer(size);
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        --r->puts_pending;
        PushFailedLocked(*r, s.WithContext(fmt::format("push of layer {} rejected", l)));
        r->aborted = !r->queued;
      }
      report_cv_.notify_all();
      return;
    }
  }
}

void Decoder::PushFailedLocked(DeReq& r, const Status& why) {
  // The DE-path KV will never reach the PE in full. The PE notices only a peer its own transfer
  // engine sees die; after a compute link outage longer than the peer timeout this engine has
  // dropped the PE while the PE still sees this engine alive, and it would wait for the missing
  // layers until its request timeout (60 s by default). So this engine reports the attempt failed
  // itself (once): the service re-submits it; the PE's own failure report of the same attempt
  // comes later and is dropped as stale.
  if (r.push_failed) return;
  r.push_failed = true;
  log::Warn("engine {}: request {} attempt {}: {}; reporting it failed", ctx_.options.name,
            r.a.request().request_id(), r.a.attempt(), why.ToString());
  to_report_.push_back({FailedResult(r.a, why), 0});
}

void Decoder::ReapLocked(std::vector<std::shared_ptr<DeReq>>* freed) {
  const SteadyTime now = std::chrono::steady_clock::now();
  for (auto it = reqs_.begin(); it != reqs_.end();) {
    DeReq& r = *it->second;
    if (!r.queued && !r.aborted && !r.expired && now >= r.deadline) {
      // The PE's puts into this buffer are one-sided and only the PE knows whether more are
      // coming (the request may still be queued for its compute, as under a PE slower than the
      // timeout): freeing it now would let a later request's KV be overwritten (docs/engine.md
      // "Failures"). Its PrefillDone is refused from now on; the buffer is held until the PE can
      // no longer write into it: its PrefillDone or AbortDecode (both sent once its puts are
      // done), or the prober's release of it (disconnected both ways).
      r.expired = true;
      const Status why = Timeout(fmt::format("request {} attempt {} timed out waiting for its PE",
                                             r.a.request().request_id(), r.a.attempt()));
      log::Warn("engine {}: {} ({}); its buffer is held until the PE can no longer write into it",
                ctx_.options.name, why.message(), r.pe_name);
      ctx_.metrics->OnFailed(why);
    }
    // A PE cut off from us (partition) never sends PrefillDone; once the prober has disconnected
    // it (nothing of it can land in the buffer any more) the buffer need not wait for its word.
    // A PE the scheduler merely stopped listing is not enough: after a service restart a live PE
    // is unlisted until it registers again, and its old work still runs.
    const bool pe_gone = !r.queued && !r.aborted && ctx_.prober != nullptr &&
                         ctx_.prober->Released(r.a.prefill().name());
    if ((r.aborted || pe_gone) && !r.queued && !r.reading && r.puts_pending == 0 &&
        r.rack_reads == 0) {
      ReleaseRackLocked(r);
      if (pe_gone) {
        log::Warn(
            "engine {}: request {} attempt {}: its PE {} is unreachable and disconnected; "
            "freeing it",
            ctx_.options.name, r.a.request().request_id(), r.a.attempt(), r.pe_name);
      }
      unfinished_tokens_ -= r.capacity;
      freed->push_back(it->second);
      it = reqs_.erase(it);
    } else {
      ++it;
    }
  }
}

void Decoder::DecodeLoop() {
  DecodeState st;
  while (DecodeIteration(&st)) {
  }
  // Stopping: the requests still decoding are reported failed (the scheduler re-submits them)
  // instead of holding the engine's exit for the rest of their generation.
  for (auto& a : st.active) Abandon(*a, Status(Code::kEngineStopped, "decode engine stopping"));
  // The retiring ones are done: their blocks are queued now, waiting for space (the write-behind
  // is closed only after this thread returns, and its worker always makes progress), then they
  // are reported as usual.
  for (auto& a : st.retiring) {
    int unlimited = std::numeric_limits<int>::max();
    while (!QueueWrites(*a, unlimited)) write_behind_.Flush();
    Finish(*a);
  }
}

bool Decoder::DecodeIteration(DecodeState* st) {
  const bool serial = ctx_.options.decode_batching == DecodeBatching::kSerial;
  std::vector<std::shared_ptr<DeReq>> joining;
  std::vector<std::shared_ptr<DeReq>> freed;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (st->active.empty()) {
      // Nothing to step: wait for work, or (with retiring requests whose blocks the full queue
      // refused) for the write-behind to free space. The timed wait is for the reaper (timeouts
      // have no other event to wake on).
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] {
        return stop_ || !ready_.empty() || (write_space_ && !st->retiring.empty());
      });
    }
    if (stop_) {
      return false;
    }
    // Consumed before this iteration offers blocks: space freed from now on sets it again, so the
    // wait above cannot miss it.
    write_space_ = false;
    ReapLocked(&freed);
    // Arrivals join at the step boundary, first come first served, up to the batch bound
    // (continuous: max_decode_batch, 0 for none; serial is a batch of one: one request, and only
    // when none is decoding).
    const size_t bound = serial ? 1 : ctx_.options.max_decode_batch;
    size_t take = ready_.size();
    if (bound != 0) {
      take = std::min(take, bound > st->active.size() ? bound - st->active.size() : 0);
    }
    joining.assign(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(take));
    ready_.erase(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(take));
  }
  for (auto& f : freed) {
    ctx_.arena->Free(f->area);
  }
  for (auto& r : joining) {
    st->active.push_back(BeginDecode(r));
    Active& a = *st->active.back();
    // A request with gen_tokens 1 runs no step: it takes no rank.
    if (ranks_ != nullptr && !Finished(a)) {
      a.rank = DecodeRankFor(rank_tokens_);
      a.rank_tokens = a.r->plan.prompt + a.r->a.request().gen_tokens();
      rank_tokens_[a.rank] += a.rank_tokens;
    }
  }
  std::vector<Active*> batch;
  batch.reserve(st->active.size());
  for (auto& a : st->active) {
    if (!Finished(*a)) batch.push_back(a.get());  // gen_tokens == 1 needs no step
  }
  if (!batch.empty()) {
    Step(batch);
  }
  // Retire the finished requests: done decoding, but their buffers hold the KV of blocks not yet
  // queued for write-behind, so they are reported (and freed) only once all of them are queued.
  for (size_t i = 0; i < st->active.size();) {
    if (Finished(*st->active[i])) {
      st->active[i]->done_ns = RealtimeNs();
      if (ranks_ != nullptr) rank_tokens_[st->active[i]->rank] -= st->active[i]->rank_tokens;
      st->retiring.push_back(std::move(st->active[i]));
      st->active.erase(st->active.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  // Offer the computed blocks to the write-behind without waiting: retiring requests first
  // (their results wait for them), then decoding ones in join order, until the queue refuses
  // one or (while requests decode) this boundary's budget is spent. What is not queued stays in
  // its request's buffer for the next boundary.
  int budget = st->active.empty() ? std::numeric_limits<int>::max() : kQueuedBlocksPerStep;
  bool full = false;
  for (auto* list : {&st->retiring, &st->active}) {
    for (auto& a : *list) {
      if (budget <= 0 || full) break;
      full = !QueueWrites(*a, budget);
    }
  }
  // Report (and free) the retiring requests whose blocks are all queued: the reporter flushes the
  // write-behind before it reports, so their next turns find the blocks.
  for (size_t i = 0; i < st->retiring.size();) {
    if (!WritesPending(*st->retiring[i])) {
      Finish(*st->retiring[i]);
      st->retiring.erase(st->retiring.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return true;
}

void Decoder::Report(const v1c::RequestResult& result) {
  Status rs = ctx_.scheduler->ReportResult(result);
  if (!rs.ok()) {
    log::Warn("engine {}: reporting request {}: {}", ctx_.options.name, result.request_id(),
              rs.ToString());
  }
}

void Decoder::ReportLoop() {
  while (true) {
    std::deque<Outgoing> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      report_cv_.wait(lock, [&] { return !to_report_.empty() || !decode_running_; });
      if (to_report_.empty()) {
        return;
      }
      batch.swap(to_report_);
    }
    for (Outgoing& out : batch) {
      // The next turn of this agent hits its blocks only if they are published before its Submit
      // probes storage, i.e. before the result reaches the replayer. It waits for the blocks
      // queued up to its own last one (the queue finishes them in order), not for blocks queued
      // after it: in a burst of first turns each result goes out as soon as its own blocks are
      // written, not when the whole queue is.
      // Without result_after_write the result goes out at once and the blocks are written
      // beside the next requests, unless it queued many (EngineOptions::result_after_write,
      // result_wait_blocks).
      if (out.wait_for_blocks) write_behind_.FlushTo(out.blocks_seq);
      if (out.result.has_timing()) out.result.mutable_timing()->set_reported_ns(RealtimeNs());
      Report(out.result);
    }
    if (!write_behind_.last_error().ok()) {
      log::Debug("engine {}: write-behind last error: {}", ctx_.options.name,
                 write_behind_.last_error().ToString());
    }
  }
}

void Decoder::Release(DeReq& r) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Our pushes to the PE read the area; the PE saw their notices, but their completions may
    // still be on the way back. The transfer engine completes every batch, so this ends.
    cv_.wait_until(lock, ctx_.Deadline(), [&] { return r.puts_pending == 0 && r.rack_reads == 0; });
    ReleaseRackLocked(r);
    if (r.puts_pending != 0 || r.rack_reads != 0) {
      log::Error("engine {}: request {} buffer leaked: pushes still in flight", ctx_.options.name,
                 r.a.request().request_id());
      reqs_.erase(r.xfer_id);
      unfinished_tokens_ -= r.capacity;
      return;
    }
    reqs_.erase(r.xfer_id);
    unfinished_tokens_ -= r.capacity;
  }
  ctx_.arena->Free(r.area);
}

std::unique_ptr<Decoder::Active> Decoder::BeginDecode(const std::shared_ptr<DeReq>& r) {
  auto a = std::make_unique<Active>();
  a->r = r;
  a->start_ns = RealtimeNs();
  const v1c::RequestSpec& spec = r->a.request();
  const int64_t prompt = r->plan.prompt;
  const uint32_t gen = spec.gen_tokens();
  const int64_t bt = ctx_.block_tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a->done = r->done;
    a->ready_ns = r->ready_ns;
  }
  a->tokens.assign(spec.prompt().begin(), spec.prompt().end());
  a->tokens.insert(a->tokens.end(), spec.teacher().begin(),
                   spec.teacher().begin() + static_cast<ptrdiff_t>(gen - 1));
  a->full_blocks = static_cast<int64_t>(a->tokens.size()) / bt;
  // The prompt's blocks are named by the carried chain; only the blocks the fed tokens complete
  // are hashed here, continuing the chain from the last full prompt block.
  a->hashes = r->prompt_hashes;
  const int64_t prompt_blocks = static_cast<int64_t>(a->hashes.size());
  const std::span<const uint32_t> rest(a->tokens.data() + prompt_blocks * bt,
                                       static_cast<size_t>((a->full_blocks - prompt_blocks) * bt));
  if (a->hashes.empty()) {
    ctx_.hasher->HashBlocks(rest, &a->hashes);
  } else {
    ctx_.hasher->HashBlocks(a->hashes.back(), rest, &a->hashes);  // copies the parent first
  }
  // Blocks below the loaded prefix came from storage and are there; the rest are queued for
  // write-behind once their last position is computed, by the step loop after the first step
  // (so encoding the prompt's new blocks does not delay the request's second token).
  a->first_write = std::clamp<int64_t>(a->done.loaded_tokens(), 0, prompt) / bt;
  a->next_write = a->first_write;
  a->computed = prompt;
  a->generated.reserve(gen);
  a->generated.push_back(a->done.first_token());
  return a;
}

bool Decoder::Finished(const Active& a) const {
  return a.next_step >= a.r->a.request().gen_tokens();
}

bool Decoder::WritesPending(const Active& a) const {
  return a.next_write < a.full_blocks && (a.next_write + 1) * ctx_.block_tokens <= a.computed;
}

bool Decoder::QueueWrites(Active& a, int& budget) {
  const int64_t bt = ctx_.block_tokens;
  const uint64_t layer_bytes = ctx_.shape.LayerBytes();
  block_.resize(ctx_.shape.FullBytes());
  while (budget > 0 && WritesPending(a)) {
    for (uint32_t l = 0; l < ctx_.layers; ++l) {
      std::memcpy(block_.data() + l * layer_bytes,
                  a.r->area + l * a.r->stride + static_cast<uint64_t>(a.next_write * bt) * ctx_.bpt,
                  layer_bytes);
    }
    Status s =
        write_behind_.Submit(a.hashes[static_cast<size_t>(a.next_write)], ctx_.shape, block_);
    if (s.code() == Code::kStorageQueueFull) {
      return false;  // kept: the buffer still holds it; offered again at a later boundary
    }
    if (!s.ok()) {
      // Closed or refused for good: there is nothing to retry (the block is a miss next turn).
      log::Warn("engine {}: write-behind of block {} of request {}: {}", ctx_.options.name,
                a.next_write, a.r->a.request().request_id(), s.ToString());
    }
    ++a.next_write;
    --budget;
  }
  return true;
}

void Decoder::Step(std::span<Active* const> batch) {
  const model::RefModel& m = *ctx_.model;
  const size_t h = m.config().hidden();
  const size_t vocab = m.config().vocab;
  const size_t n = batch.size();
  const uint64_t bpt = ctx_.bpt;
  step_hidden_.resize(n * h);
  step_logits_.resize(n * vocab);
  step_seqs_.resize(n);
  // Step j of a request feeds teacher[j - 1] at position prompt + j - 1 (model::Reference's
  // schedule), whatever else is in the batch.
  for (size_t i = 0; i < n; ++i) {
    const Active& a = *batch[i];
    const uint32_t tok = a.r->a.request().teacher(static_cast<int>(a.next_step - 1));
    m.Embed({&tok, 1}, std::span<float>(step_hidden_).subspan(i * h, h));
  }
  // Data-parallel attention when the batch spans more than one rank; a batch on one rank is
  // computed by this thread (the same bits either way: each sequence's attention is its own).
  bool spread = false;
  if (ranks_ != nullptr) {
    for (size_t i = 1; i < n && !spread; ++i) spread = batch[i]->rank != batch[0]->rank;
    if (spread) std::fill(rank_ns_.begin(), rank_ns_.end(), 0);
  }
  for (uint32_t l = 0; l < ctx_.layers; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const DeReq& r = *batch[i]->r;
      const uint64_t pos = static_cast<uint64_t>(r.plan.prompt) + batch[i]->next_step - 1;
      step_seqs_[i] = {pos, 1, {r.area + l * r.stride, (pos + 1) * bpt}, batch[i]->rank};
    }
    if (spread) {
      m.ForwardLayerBatch(l, step_seqs_, step_hidden_, *ranks_, rank_ns_);
    } else {
      m.ForwardLayerBatch(l, step_seqs_, step_hidden_);
    }
  }
  m.LogitsRows(step_hidden_, step_logits_);
  const int64_t now_ns = RealtimeNs();
  for (size_t i = 0; i < n; ++i) {
    Active& a = *batch[i];
    a.generated.push_back(
        model::RefModel::Argmax(std::span<const float>(step_logits_).subspan(i * vocab, vocab)));
    if (a.next_step == 1) {
      a.second_token_ns = now_ns;
    }
    ++a.next_step;
    a.computed = a.r->plan.prompt + a.next_step - 1;  // positions [0, prompt + j) computed
  }
  ctx_.metrics->OnDecodeStep(
      n, spread ? std::span<const int64_t>(rank_ns_) : std::span<const int64_t>());
}

void Decoder::Finish(Active& a) {
  DeReq& r = *a.r;
  const v1c::RequestSpec& spec = r.a.request();
  const uint32_t gen = spec.gen_tokens();
  const int64_t done_ns = a.done_ns;
  const int64_t retired_ns = RealtimeNs();
  // Every block of it is queued by now; with result_after_write the reporter waits until they are
  // written before it reports this result (ReportLoop).
  v1c::RequestResult res;
  res.set_request_id(spec.request_id());
  res.set_ok(true);
  for (uint32_t t : a.generated) {
    res.add_generated(t);
  }
  res.set_first_logits_digest(a.done.first_logits_digest());
  res.set_side(r.a.side());
  res.set_prefill_engine(r.a.prefill_engine());
  res.set_decode_engine(r.a.decode_engine());
  res.set_hit_tokens(r.a.hit_tokens());
  res.set_loaded_tokens(a.done.loaded_tokens());
  res.set_read_bytes_prefill(a.done.read_bytes_prefill());
  {
    std::lock_guard<std::mutex> lock(mu_);
    res.set_read_bytes_decode(r.read_bytes);
  }
  v1c::Timing* t = res.mutable_timing();
  t->set_prefill_start_ns(a.done.prefill_start_ns());
  t->set_first_token_ns(a.done.first_token_ns());
  t->set_second_token_ns(gen > 1 ? a.second_token_ns : done_ns);
  t->set_done_ns(done_ns);
  t->set_decode_ready_ns(a.ready_ns);
  t->set_decode_start_ns(a.start_ns);
  t->set_retired_ns(retired_ns);
  res.set_attempt(r.a.attempt());
  const uint32_t wait_min = ctx_.options.result_wait_blocks;
  const bool wait = ctx_.options.result_after_write ||
                    (wait_min != 0 && a.full_blocks - a.first_write >= int64_t{wait_min});
  Release(r);
  // Every block of it is queued (or was already): they are among the first accepted() blocks.
  const uint64_t blocks_seq = write_behind_.accepted();
  {
    std::lock_guard<std::mutex> lock(mu_);
    to_report_.push_back({std::move(res), blocks_seq, wait});
  }
  report_cv_.notify_all();
}

void Decoder::Abandon(Active& a, const Status& why) {
  log::Warn("engine {}: request {} failed in decode: {}", ctx_.options.name,
            a.r->a.request().request_id(), why.ToString());
  ctx_.metrics->OnFailed(why);
  Release(*a.r);
  {
    std::lock_guard<std::mutex> lock(mu_);
    to_report_.push_back({FailedResult(a.r->a, why), 0});
  }
  report_cv_.notify_all();
}

}  // namespace dualpath::engine
