// TransferEngine data path: the progress thread, batch posting, completions, peer failure.
#include <fmt/format.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include "dualpath/common/check.h"
#include "dualpath/common/log.h"
#include "engine_impl.h"
#include "socket_tos.h"

namespace dualpath::transfer {
namespace {

int Tos(const ClassConfig& c) { return c.dscp < 0 ? -1 : TosForDscp(c.dscp); }

// The engine whose progress_mu_ this thread holds (the progress thread, or a submitter posting
// inline). A callback that runs there and calls Submit must queue rather than try_lock a mutex
// its own thread holds.
thread_local const void* t_progress_owner = nullptr;

void OpCallback(void* request, ucs_status_t status, void* user_data) {
  auto* b = static_cast<InflightBatch*>(user_data);
  ucp_request_free(request);
  b->peer->engine->OnOpDone(b, status);
}

}  // namespace

// ---- submission (caller threads) ----

Status EngineImpl::Submit(Batch batch) {
  auto b = std::make_unique<InflightBatch>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(batch.peer.value());
    if (it == peers_.end()) {
      return NotFound(fmt::format("unknown peer {}", batch.peer.value()));
    }
    if (it->second->dead) {
      return it->second->death;
    }
    b->peer = it->second;
    b->table = it->second->table;
    if (!batch.notice_payload.empty() && !batch.notify) {
      return InvalidArgument(
          fmt::format("peer {}: a notice payload without notify", batch.peer.value()));
    }
    if (batch.notice_payload.size() > kMaxNoticePayload) {
      return InvalidArgument(fmt::format("peer {}: notice payload of {} bytes > {}",
                                         batch.peer.value(), batch.notice_payload.size(),
                                         kMaxNoticePayload));
    }
    // Validation happens here, on the caller's thread and before anything is queued: a bad
    // batch costs the caller an error, never a partial transfer. A notice alone (no descriptors)
    // is a message and has nothing to validate.
    if (!batch.descs.empty() || !batch.notify) {
      RETURN_IF_ERROR(ValidateBatch(batch.descs, local_index_, b->table->index, &b->regions)
                          .WithContext(fmt::format("peer {}", batch.peer.value())));
    }
  }
  for (const Descriptor& d : batch.descs) {
    b->bytes += d.length;
  }
  b->req = std::move(batch);
  if (config_.post_on_submit && t_progress_owner != this) {
    b = TryPostInline(std::move(b));
    if (b == nullptr) {
      return Status::Ok();
    }
  }
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_.push_back(std::move(b));
    queued_.store(true, std::memory_order_seq_cst);
    wake = sleeping_.load(std::memory_order_seq_cst);
  }
  if (wake) {
    uint64_t one = 1;
    (void)!write(wakefd_, &one, sizeof one);
  }
  return Status::Ok();
}

std::unique_ptr<InflightBatch> EngineImpl::TryPostInline(std::unique_ptr<InflightBatch> b) {
  std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
  // The progress thread is awake (it will pick the batch up within a round), or something is
  // queued that must go first (tasks, earlier batches: a caller's batches stay in order).
  // `progress_waking_`: the progress thread has left epoll_wait and waits for the lock; a caller
  // submitting in a loop could otherwise win the (unfair) mutex every time and starve it.
  if (!lock.owns_lock() || queued_.load(std::memory_order_seq_cst) ||
      progress_waking_.load(std::memory_order_relaxed) ||
      stop_progress_.load(std::memory_order_relaxed)) {
    return b;
  }
  t_progress_owner = this;
  posted_inline_.fetch_add(1, std::memory_order_relaxed);
  Admit(std::move(b));
  // The progress thread armed the workers before it went to sleep, and the calls above may have
  // consumed the events that would have woken it. Anything left outstanding (this batch over
  // TCP, older batches, a deferred low-class batch, a peer to kill) needs it awake to re-arm.
  // On shared memory the batch usually completed above and nobody is woken.
  bool wake = !inflight_.empty() || !deferred_low_.empty() || !to_kill_.empty();
  t_progress_owner = nullptr;
  lock.unlock();
  if (wake) {
    Wake();
  }
  return nullptr;
}

void EngineImpl::Wake() {
  uint64_t one = 1;
  (void)!write(wakefd_, &one, sizeof one);
}

void EngineImpl::RunOnProgress(std::function<void()> task) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    queued_.store(true, std::memory_order_seq_cst);
    wake = sleeping_.load(std::memory_order_seq_cst);
  }
  if (wake) {
    uint64_t one = 1;
    (void)!write(wakefd_, &one, sizeof one);
  }
}

// ---- progress thread ----

void EngineImpl::ProgressLoop() {
  std::unique_lock<std::mutex> progress_lock(progress_mu_);
  t_progress_owner = this;
  unsigned spins = 0;
  Nanos last_activity = 0;
  while (!stop_progress_.load(std::memory_order_relaxed)) {
    bool did = false;
    if (queued_.load(std::memory_order_acquire)) {
      did |= DrainQueues();
    }
    for (int c = 0; c < kNumClasses; ++c) {
      // Sockets the tcp transport opens while progressing this worker (connection
      // establishment happens lazily here) carry this class's DSCP.
      // One call per worker per round: looping until a busy low-class worker runs dry would
      // starve the high class and the submission queue.
      ScopedSocketTos tos(Tos(config_.classes[c]));
      if (ucp_worker_progress(worker_[c]) != 0) {
        did = true;
      }
    }
    if (!to_kill_.empty()) {
      auto victims = std::move(to_kill_);
      to_kill_.clear();
      for (auto& p : victims) {
        KillPeer(*p, p->pending_kill);
      }
    }
    if (!deferred_low_.empty()) {
      AdmitDeferred();
    }
    if (!inflight_.empty() && (++spins & 63) == 0) {
      CheckTimeouts();
    }
    if (did) {
      if (config_.busy_poll) {
        last_activity = clock_.Now();
      }
      continue;
    }
    // Busy polling also covers a short idle window after the last event: a caller that keeps a
    // few batches in flight submits the next one within microseconds of a completion, and
    // sleeping in epoll in between would cost a wake-up (eventfd write + scheduler latency) per
    // batch, which dominates when a batch is a single shared-memory copy.
    if (config_.busy_poll &&
        (!inflight_.empty() || clock_.Now() - last_activity < config_.idle_spin)) {
      continue;
    }
    if (polled_in_flight_ > 0) continue;  // Batch::poll
    SleepOnWorkers(progress_lock);
  }
}

void EngineImpl::SleepOnWorkers(std::unique_lock<std::mutex>& progress_lock) {
  sleeping_.store(true, std::memory_order_seq_cst);
  if (queued_.load(std::memory_order_seq_cst)) {
    sleeping_.store(false, std::memory_order_relaxed);
    return;
  }
  for (int c = 0; c < kNumClasses; ++c) {
    ucs_status_t st = ucp_worker_arm(worker_[c]);
    if (st == UCS_ERR_BUSY) {  // events arrived meanwhile: progress again
      sleeping_.store(false, std::memory_order_relaxed);
      return;
    }
  }
  // With operations outstanding, wake in time to enforce the peer timeout.
  int timeout_ms = -1;
  if (!inflight_.empty()) {
    timeout_ms =
        static_cast<int>(std::clamp<Nanos>(config_.peer_timeout / 4 / kNanosPerMilli, 1, 1000));
  }
  epoll_event evs[4];
  // Asleep, the thread gives up the workers: a submitter may post meanwhile (post_on_submit).
  progress_lock.unlock();
  sleeps_.fetch_add(1, std::memory_order_relaxed);
  int n = epoll_wait(epfd_, evs, 4, timeout_ms);
  progress_waking_.store(true, std::memory_order_relaxed);
  progress_lock.lock();
  progress_waking_.store(false, std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u32 == 1000) {
      uint64_t v = 0;
      (void)!read(wakefd_, &v, sizeof v);
    }
  }
  sleeping_.store(false, std::memory_order_relaxed);
  if (!inflight_.empty()) {
    CheckTimeouts();
  }
}

bool EngineImpl::DrainQueues() {
  std::deque<std::function<void()>> tasks;
  std::deque<std::unique_ptr<InflightBatch>> batches;
  bool handler_changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
    batches.swap(submitted_);
    queued_.store(false, std::memory_order_relaxed);
    if (notice_handler_changed_) {
      notice_handler_ = notice_handler_shared_;
      notice_handler_changed_ = false;
      handler_changed = true;
    }
  }
  for (auto& t : tasks) {
    t();
  }
  for (auto& b : batches) {
    Admit(std::move(b));
  }
  return handler_changed || !tasks.empty() || !batches.empty();
}

void EngineImpl::Admit(std::unique_ptr<InflightBatch> b) {
  PeerState& p = *b->peer;
  if (p.killed) {
    b->status = p.kill_status;
    InflightBatch* raw = b.release();
    AddInflight(raw);
    Finish(raw);
    return;
  }
  if (b->req.cls == TrafficClass::kLow) {
    // FIFO: a batch never overtakes an earlier deferred one, so KV layers stay in order.
    if (!deferred_low_.empty() || !low_budget_.TryAcquire(b->bytes)) {
      low_deferred_.fetch_add(1, std::memory_order_relaxed);
      deferred_low_.push_back(std::move(b));
      return;
    }
    b->budget_held = true;
    uint64_t now = low_budget_.in_flight();
    low_in_flight_.store(now, std::memory_order_relaxed);
    if (now > low_in_flight_max_.load(std::memory_order_relaxed)) {
      low_in_flight_max_.store(now, std::memory_order_relaxed);
    }
  }
  InflightBatch* raw = b.release();
  AddInflight(raw);
  Post(raw);
}

void EngineImpl::AdmitDeferred() {
  while (!deferred_low_.empty()) {
    InflightBatch* front = deferred_low_.front().get();
    if (!front->peer->killed && !low_budget_.TryAcquire(front->bytes)) {
      return;
    }
    std::unique_ptr<InflightBatch> b = std::move(deferred_low_.front());
    deferred_low_.pop_front();
    if (b->peer->killed) {
      b->status = b->peer->kill_status;
      InflightBatch* raw = b.release();
      AddInflight(raw);
      Finish(raw);
      continue;
    }
    b->budget_held = true;
    uint64_t now = low_budget_.in_flight();
    low_in_flight_.store(now, std::memory_order_relaxed);
    low_in_flight_max_.store(std::max(now, low_in_flight_max_.load()), std::memory_order_relaxed);
    InflightBatch* raw = b.release();
    AddInflight(raw);
    Post(raw);
  }
}

Result<ucp_rkey_h> EngineImpl::Rkey(PeerState& p, int c, uint32_t region,
                                    const RemoteTable& table) {
  auto ad = table.adverts.find(region);
  DUALPATH_CHECK(ad != table.adverts.end(), "validated region missing from its table");
  const std::string& blob = ad->second.rkeys[c];
  auto& cache = p.rkeys[c];
  auto it = cache.find(region);
  if (it != cache.end()) {
    if (it->second.first == blob) {
      return it->second.second;
    }
    // The peer re-registered the id with a new key: drop the stale unpacked key.
    ucp_rkey_destroy(it->second.second);
    cache.erase(it);
  }
  ucp_rkey_h rkey = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(p.ep[c], blob.data(), &rkey);
  if (st != UCS_OK) {
    return Status(Code::kTransferBadRkey,
                  fmt::format("unpack remote key of region {}: {}", region, ucs_status_string(st)));
  }
  cache.emplace(region, std::make_pair(blob, rkey));
  return rkey;
}

Status PeerState::DeathStatus(std::string_view reason) const {
  return Status(Code::kTransferPeerDead, fmt::format("peer {} ({}): {}", id.value(), name, reason));
}

bool PeerState::MarkDeadLocked(std::string_view reason) {
  if (dead) return false;
  dead = true;
  death = DeathStatus(reason);
  return true;
}

Status EngineImpl::DeclareDead(PeerState& p, const std::string& reason) {
  // Runs on the thread that owns progress_mu_, possibly inside ucp_worker_progress. The peer is
  // marked dead (refused by Submit, gone from Peers) before any of its batches' completion
  // callbacks run, so a caller that sees kTransferPeerDead and submits again is refused. The
  // endpoints are closed after progress returns (closing them here would free UCX state the
  // caller is still walking).
  {
    std::lock_guard<std::mutex> lock(mu_);
    p.MarkDeadLocked(reason);
  }
  if (!p.killed && p.pending_kill.empty()) {
    p.pending_kill = reason;
    auto it = by_engine_id_.find(p.engine_id);
    if (it != by_engine_id_.end()) {
      to_kill_.push_back(it->second);
    }
  }
  return p.DeathStatus(reason);
}

Status EngineImpl::PostError(PeerState& p, ucs_status_t st, std::string_view what) {
  // Posting fails on an endpoint UCX has already declared failed (its error callback may not
  // have run yet): that is the peer's death, reported as such, and the peer is closed.
  return DeclareDead(p, fmt::format("{}: {}", what, ucs_status_string(st)));
}

void EngineImpl::Post(InflightBatch* b) {
  PeerState& p = *b->peer;
  const int c = ClassIndex(b->req.cls);
  ucp_ep_h ep = p.ep[c];
  b->posted = true;
  if (p.batches_in_flight++ == 0) {
    p.last_progress = clock_.Now();  // the peer's timeout runs from its first outstanding op
  }
  b->outstanding = 1;  // held while posting so a completion inside a call cannot finish b
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.cb.send = OpCallback;
  param.user_data = b;
  // Registered regions are host memory (no GPU here): saying so spares UCX a memory-type lookup
  // per descriptor.
  param.memory_type = UCS_MEMORY_TYPE_HOST;
  ScopedSocketTos tos(Tos(config_.classes[c]));
  const Nanos post_start = clock_.Now();
  uint32_t cached_region = 0;
  ucp_rkey_h rkey = nullptr;
  size_t posted = 0;
  size_t descs = 0;
  const std::vector<Descriptor>& all = b->req.descs;
  for (size_t i = 0; i < all.size(); ++i) {
    Descriptor d = all[i];
    const size_t first = i;
    // Coalesce: extend `d` over the descriptors that continue it on both sides in the same
    // regions (validated at Submit: each lies inside its region, so the run does too), up to
    // coalesce_max_bytes.
    while (b->req.coalesce && i + 1 < all.size() &&
           all[i + 1].local_addr == d.local_addr + d.length &&
           all[i + 1].remote_addr == d.remote_addr + d.length &&
           b->regions[i + 1].local == b->regions[first].local &&
           b->regions[i + 1].remote == b->regions[first].remote &&
           d.length < config_.coalesce_max_bytes &&
           all[i + 1].length <= config_.coalesce_max_bytes - d.length) {
      d.length += all[++i].length;
    }
    uint32_t region = b->regions[first].remote.value();
    if (rkey == nullptr || region != cached_region) {
      Result<ucp_rkey_h> r = Rkey(p, c, region, *b->table);
      if (!r.ok()) {
        b->status = r.status();
        break;
      }
      rkey = *r;
      cached_region = region;
    }
    ucs_status_ptr_t sp = b->req.op == Op::kPut
                              ? ucp_put_nbx(ep, reinterpret_cast<const void*>(d.local_addr),
                                            d.length, d.remote_addr, rkey, &param)
                              : ucp_get_nbx(ep, reinterpret_cast<void*>(d.local_addr), d.length,
                                            d.remote_addr, rkey, &param);
    if (UCS_PTR_IS_ERR(sp)) {
      b->status = PostError(p, UCS_PTR_STATUS(sp), fmt::format("post descriptor {}", first));
      break;
    }
    ++posted;
    descs += i + 1 - first;
    if (sp != nullptr) {
      ++b->outstanding;
      ++ops_outstanding_;
    }
  }
  ops_posted_.fetch_add(posted, std::memory_order_relaxed);
  descs_posted_.fetch_add(descs, std::memory_order_relaxed);
  // One flush per batch: it completes when every operation above is complete at the peer, which
  // is what makes "batch done" mean "data visible remotely" for puts.
  if (posted > 0) {
    ucs_status_ptr_t sp = ucp_ep_flush_nbx(ep, &param);
    if (UCS_PTR_IS_ERR(sp)) {
      if (b->status.ok()) {
        b->status = PostError(p, UCS_PTR_STATUS(sp), "ucp_ep_flush_nbx");
      }
    } else if (sp != nullptr) {
      ++b->outstanding;
      ++ops_outstanding_;
    }
  }
  post_nanos_.fetch_add(static_cast<uint64_t>(clock_.Now() - post_start),
                        std::memory_order_relaxed);
  if (--b->outstanding == 0) {
    PhaseDone(b);
  }
}

void EngineImpl::OnOpDone(InflightBatch* b, ucs_status_t st) {
  --ops_outstanding_;
  PeerState& p = *b->peer;
  p.last_progress = clock_.Now();
  if (st != UCS_OK && b->status.ok()) {
    if (st == UCS_ERR_CANCELED && p.killed) {
      b->status = p.kill_status;
    } else {
      // A failed operation means a failed endpoint: the peer is dead from now on, before this
      // batch's callback can tell anyone.
      b->status = DeclareDead(p, fmt::format("operation failed: {}", ucs_status_string(st)));
    }
  }
  if (--b->outstanding == 0) {
    PhaseDone(b);
  }
}

void EngineImpl::PhaseDone(InflightBatch* b) {
  PeerState& p = *b->peer;
  if (!b->notice_phase && b->status.ok() && b->req.notify && !p.killed) {
    // The data is complete at the peer (flush done); now tell it which batch that was. AM
    // delivery is ordered after the flush on this endpoint.
    b->notice_phase = true;
    const int c = ClassIndex(b->req.cls);
    NoticeHeader h{engine_id_, b->req.notice_tag};
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
    param.cb.send = OpCallback;
    param.user_data = b;
    ScopedSocketTos tos(Tos(config_.classes[c]));
    // The header is copied by UCX before ucp_am_send_nbx returns for eager sends... except when
    // the request is queued; keep it in the batch to be safe.
    b->notice_buf = h;
    // The payload lives in the batch until Finish, so a queued send may still read it.
    const std::string& payload = b->req.notice_payload;
    ucs_status_ptr_t sp =
        ucp_am_send_nbx(p.ep[c], kNoticeAmId, &b->notice_buf, sizeof b->notice_buf,
                        payload.empty() ? nullptr : payload.data(), payload.size(), &param);
    if (UCS_PTR_IS_ERR(sp)) {
      b->status = PostError(p, UCS_PTR_STATUS(sp), "send notice");
    } else if (sp != nullptr) {
      b->outstanding = 1;
      ++ops_outstanding_;
      return;
    }
  }
  Finish(b);
}

void EngineImpl::Finish(InflightBatch* b) {
  PeerState& p = *b->peer;
  if (b->budget_held) {
    low_budget_.Release(b->bytes);
    low_in_flight_.store(low_budget_.in_flight(), std::memory_order_relaxed);
  }
  auto it = std::find(inflight_.begin(), inflight_.end(), b);
  DUALPATH_CHECK(it != inflight_.end(), "finishing a batch that is not in flight");
  *it = inflight_.back();
  inflight_.pop_back();
  if (b->req.poll) --polled_in_flight_;
  if (b->posted) {
    --p.batches_in_flight;
  }
  if (!b->user_notified) {
    b->user_notified = true;
    (b->status.ok() ? batches_completed_ : batches_failed_).fetch_add(1);
    if (b->req.on_complete) {
      b->req.on_complete(b->status);
    }
  }
  delete b;
}

void EngineImpl::OnEpError(PeerState* p, ucs_status_t st) {
  // Called inside ucp_worker_progress: mark and queue; the endpoint is closed after progress
  // returns.
  if (p->killed || !p->pending_kill.empty()) {
    return;
  }
  // No batch to fail here: the kill that follows fails them with the peer's death status.
  (void)DeclareDead(*p, fmt::format("endpoint error: {}", ucs_status_string(st)));
}

void EngineImpl::OnNotice(const NoticeHeader& h, std::string_view payload) {
  auto it = by_engine_id_.find(h.engine_id);
  if (it == by_engine_id_.end()) {
    // The sender finished its handshake before this side registered it: deliver later.
    early_notices_.emplace_back(h, std::string(payload));
    return;
  }
  if (notice_handler_) {
    notice_handler_(it->second->id, h.tag, payload);
  }
}

Status EngineImpl::CreateEndpoints(const std::shared_ptr<PeerState>& peer, const Hello& hello) {
  PeerState& p = *peer;
  for (int c = 0; c < kNumClasses; ++c) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(hello.worker_addrs[c].data());
    // PEER mode: UCX detects a dead peer (keepalive, transport errors), calls the handler and
    // fails outstanding requests instead of retrying forever.
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    if (no_peer_failure_[c]) {
      ep.field_mask &= ~UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    }
    ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t st) {
      auto* peer = static_cast<PeerState*>(arg);
      peer->engine->OnEpError(peer, st);
    };
    ep.err_handler.arg = &p;
    ScopedSocketTos tos(Tos(config_.classes[c]));
    ucs_status_t st = ucp_ep_create(worker_[c], &ep, &p.ep[c]);
    if (st == UCS_ERR_UNREACHABLE && !no_peer_failure_[c]) {
      no_peer_failure_[c] = true;  // learned once per class, so UCX's complaint appears once
      // UCX 1.13's shared-memory transports (posix, sysv) cannot detect a dead peer, so no
      // transport qualifies in PEER mode. Fall back to NONE: a put into a dead peer's shared
      // segment still completes (the mapping outlives the process), and the control channel's
      // EOF plus the engine's own progress timeout declare the peer dead.
      ep.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
      log::Debug("transfer: class {} endpoint without peer failure detection (shared memory)", c);
      st = ucp_ep_create(worker_[c], &ep, &p.ep[c]);
    }
    if (st != UCS_OK) {
      for (int k = 0; k < c; ++k) {
        ucp_request_param_t rp{};
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t sp = ucp_ep_close_nbx(p.ep[k], &rp);
        if (UCS_PTR_IS_PTR(sp)) {
          ucp_request_free(sp);
        }
        p.ep[k] = nullptr;
      }
      return UcsStatus(st, "ucp_ep_create");
    }
  }
  // The map keeps the peer alive as long as UCX may call back with it (error handler argument).
  by_engine_id_[p.engine_id] = peer;
  // Notices that raced ahead of this side's half of the handshake.
  std::vector<std::pair<NoticeHeader, std::string>> early;
  early.swap(early_notices_);
  for (const auto& [h, payload] : early) {
    OnNotice(h, payload);
  }
  return Status::Ok();
}

void EngineImpl::KillPeer(PeerState& p, const std::string& reason) {
  if (p.killed) {
    return;
  }
  p.killed = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p.MarkDeadLocked(reason);
    p.kill_status = p.death;
  }
  log::Debug("transfer: peer {} dead: {}", p.id.value(), reason);
  // Fail the user's batches now (the deadline is what the caller is promised); the batch
  // objects stay until UCX returns their requests, which the forced close below cancels.
  for (InflightBatch* b : std::vector<InflightBatch*>(inflight_)) {
    if (b->peer.get() == &p && !b->user_notified) {
      if (b->status.ok()) {
        b->status = p.kill_status;
      }
      b->user_notified = true;
      batches_failed_.fetch_add(1);
      if (b->req.on_complete) {
        b->req.on_complete(b->status);
      }
    }
  }
  for (int c = 0; c < kNumClasses; ++c) {
    for (auto& [_, kr] : p.rkeys[c]) {
      ucp_rkey_destroy(kr.second);
    }
    p.rkeys[c].clear();
    if (p.ep[c] != nullptr) {
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t sp = ucp_ep_close_nbx(p.ep[c], &rp);
      if (UCS_PTR_IS_PTR(sp)) {
        // A forced close completes without the peer; progress until it is done.
        while (ucp_request_check_status(sp) == UCS_INPROGRESS) {
          ucp_worker_progress(worker_[c]);
        }
        ucp_request_free(sp);
      }
      p.ep[c] = nullptr;
    }
  }
  p.channel->Close();
  // Batches of this peer still waiting for the low-class budget fail now rather than when they
  // reach the head of the queue.
  std::deque<std::unique_ptr<InflightBatch>> keep;
  for (auto& b : deferred_low_) {
    if (b->peer.get() == &p) {
      b->status = p.kill_status;
      InflightBatch* raw = b.release();
      AddInflight(raw);
      Finish(raw);
    } else {
      keep.push_back(std::move(b));
    }
  }
  deferred_low_.swap(keep);
  AdmitDeferred();
}

void EngineImpl::CheckTimeouts() {
  Nanos now = clock_.Now();
  std::vector<PeerState*> stuck;
  for (InflightBatch* b : inflight_) {
    PeerState& p = *b->peer;
    if (!p.killed && p.batches_in_flight > 0 && now - p.last_progress > config_.peer_timeout &&
        std::find(stuck.begin(), stuck.end(), &p) == stuck.end()) {
      stuck.push_back(&p);
    }
  }
  for (PeerState* p : stuck) {
    KillPeer(*p, fmt::format("no progress for {} ms", config_.peer_timeout / kNanosPerMilli));
  }
}

void EngineImpl::Shutdown() {
  std::vector<std::shared_ptr<PeerState>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [_, p] : peers_) {
      peers.push_back(p);
    }
  }
  for (auto& p : peers) {
    KillPeer(*p, "engine shutting down");
  }
  for (auto& b : deferred_low_) {
    b->status = Status(Code::kCancelled, "engine shutting down");
    if (b->req.on_complete) {
      b->req.on_complete(b->status);
    }
  }
  deferred_low_.clear();
  stop_progress_ = true;
}

}  // namespace dualpath::transfer
