// Private: the TransferEngine implementation.
//
// Threads:
//   - the progress thread owns every UCX object (contexts, workers, endpoints, registrations,
//     unpacked rkeys). Other threads reach it through RunOnProgress / CallOnProgress tasks and
//     the submission queue, and (post_on_submit) by posting a batch themselves while holding
//     progress_mu_, which the progress thread holds whenever it is not asleep. "Progress thread
//     only" state below therefore means "whoever holds progress_mu_". UCX is told so: workers
//     run in UCS_THREAD_MODE_SERIALIZED (any thread, one at a time) rather than SINGLE.
//   - the control thread accepts peers and reads their control channels (REGIONS updates, EOF).
//   - caller threads validate batches and queue them.
// Shared state (peer tables, queues) is guarded by mu_; state marked "progress thread" is touched
// by that thread only.
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dualpath/transfer/byte_budget.h"
#include "dualpath/transfer/control_channel.h"
#include "dualpath/transfer/engine.h"
#include "dualpath/transfer/wire.h"

namespace dualpath::transfer {

// The AM id of completion notices.
inline constexpr unsigned kNoticeAmId = 7;

// A notice's header: who sent it (engine id from HELLO) and the caller's tag.
struct NoticeHeader {
  uint64_t engine_id;
  uint64_t tag;
};

// Immutable snapshot of the regions a peer advertised; batches keep the snapshot they were
// validated against, so a concurrent REGIONS update cannot change a queued batch's meaning.
struct RemoteTable {
  uint64_t generation = 0;
  RegionIndex index;
  std::unordered_map<uint32_t, RegionAdvert> adverts;
};

struct LocalRegion {
  RegionRange range;
  std::array<ucp_mem_h, kNumClasses> memh{};
  std::array<std::string, kNumClasses> rkey;  // packed
  bool allocated = false;  // memory allocated by the low class's ucp_mem_map (engine-owned)
};

// Whether two processes' UCX tcp segment sizes fit: each side's sent segments no larger than the
// other's receive segments (UCX 1.13 aborts a receiver on a larger one). 0 = that side does not
// use tcp (always fits). kFailedPrecondition naming the sizes, the side that would abort and the
// variables to change.
Status CheckTcpSegments(uint64_t my_tx, uint64_t my_rx, uint64_t peer_tx, uint64_t peer_rx,
                        std::string_view peer);

class EngineImpl;

struct PeerState {
  PeerId id;
  uint64_t engine_id = 0;
  std::string name;
  EngineImpl* engine = nullptr;
  std::unique_ptr<ControlChannel> channel;
  // Guarded by EngineImpl::mu_.
  std::shared_ptr<const RemoteTable> table;
  bool dead = false;
  Status death;
  // Progress thread only.
  std::array<ucp_ep_h, kNumClasses> ep{};
  std::array<std::unordered_map<uint32_t, std::pair<std::string, ucp_rkey_h>>, kNumClasses> rkeys;
  size_t batches_in_flight = 0;
  Nanos last_progress = 0;
  bool killed = false;       // endpoints closed, batches failed
  Status kill_status;        // why (the progress thread's copy of `death`)
  std::string pending_kill;  // set by the UCX error callback, acted on after progress

  // What every failure of this peer reports: kTransferPeerDead naming the peer and `reason`.
  Status DeathStatus(std::string_view reason) const;
  // Marks the peer dead for `reason` unless it already is; true if this call did. Requires
  // EngineImpl::mu_.
  bool MarkDeadLocked(std::string_view reason);
};

struct InflightBatch {
  Batch req;
  std::shared_ptr<PeerState> peer;
  std::vector<DescriptorRegions> regions;
  std::shared_ptr<const RemoteTable> table;
  uint64_t bytes = 0;
  size_t outstanding = 0;  // UCX requests not yet completed (+1 while posting)
  bool notice_phase = false;
  bool user_notified = false;
  bool budget_held = false;
  bool posted = false;        // counted in the peer's batches_in_flight
  NoticeHeader notice_buf{};  // the notice's header must outlive a queued ucp_am_send_nbx
  Status status;
};

class EngineImpl final : public TransferEngine {
 public:
  EngineImpl(const EngineConfig& config, Clock& clock);
  ~EngineImpl() override;
  Status Start();

  Result<RegionId> RegisterRegion(void* addr, uint64_t length) override;
  Result<std::pair<RegionId, void*>> AllocateRegion(uint64_t length) override;
  Status DeregisterRegion(RegionId id) override;
  Result<std::string> Listen(const std::string& addr_port) override;
  Result<PeerId> Connect(const std::string& addr_port) override;
  Status WaitForPeers(size_t n, Nanos timeout) override;
  std::vector<PeerId> Peers() const override;
  Status Disconnect(PeerId peer, const std::string& why) override;
  int DisconnectHost(const std::string& host, const std::string& why) override;
  Result<std::vector<RegionRange>> RemoteRegions(PeerId peer) const override;
  Status Submit(Batch batch) override;
  void SetNoticeHandler(NoticeHandler handler) override;
  Stats GetStats() const override;

  // UCX callbacks (static trampolines in progress.cc call these).
  void OnOpDone(InflightBatch* b, ucs_status_t st);
  void OnEpError(PeerState* p, ucs_status_t st);
  void OnNotice(const NoticeHeader& h, std::string_view payload);

 private:
  // --- setup (engine.cc) ---
  Status InitClass(int c);
  // Registers [addr, length) (addr null: allocate it in the low class context first) in every
  // class context; runs on the progress thread.
  Status MapRegion(void* addr, uint64_t length, LocalRegion* region);
  void UnmapRegion(const LocalRegion& region);
  Result<RegionId> AddRegion(void* addr, uint64_t length, void** out_addr);
  Hello MakeHello(uint64_t* generation);
  void BroadcastIfStale(uint64_t sent_generation);
  std::vector<RegionAdvert> AdvertsLocked();
  Result<PeerId> AddPeer(std::unique_ptr<ControlChannel> ch, const Hello& hello);
  void BroadcastRegions();
  void ControlLoop();
  // Authenticates a freshly accepted channel (peer_auth.h), then exchanges HELLOs; logs a refusal.
  void AcceptPeer(std::unique_ptr<ControlChannel> c);
  void HandleControlMessage(const std::shared_ptr<PeerState>& p);
  // Kills `victims` (already marked dead) on the progress thread and waits until it has.
  void KillNow(std::vector<std::shared_ptr<PeerState>> victims, const std::string& reason);

  // --- progress thread (progress.cc) ---
  void RunOnProgress(std::function<void()> task);
  template <typename T>
  T CallOnProgress(std::function<T()> fn) {
    auto prom = std::make_shared<std::promise<T>>();
    auto fut = prom->get_future();
    RunOnProgress([prom, fn = std::move(fn)] { prom->set_value(fn()); });
    return fut.get();
  }
  void ProgressLoop();
  bool DrainQueues();
  void Admit(std::unique_ptr<InflightBatch> b);
  void AdmitDeferred();
  void Post(InflightBatch* b);
  Status PostError(PeerState& p, ucs_status_t st, std::string_view what);
  // Marks `p` dead (under mu_) and queues it for KillPeer after the current progress call.
  // Returns p.DeathStatus(reason), the status to fail the caller's batch with.
  Status DeclareDead(PeerState& p, const std::string& reason);
  void PhaseDone(InflightBatch* b);
  void Finish(InflightBatch* b);
  Result<ucp_rkey_h> Rkey(PeerState& p, int c, uint32_t region, const RemoteTable& table);
  void KillPeer(PeerState& p, const std::string& reason);
  void CheckTimeouts();
  Status CreateEndpoints(const std::shared_ptr<PeerState>& peer, const Hello& hello);
  void Shutdown();
  void SleepOnWorkers(std::unique_lock<std::mutex>& progress_lock);
  // post_on_submit: posts `b` on the calling thread if the progress thread is asleep and nothing
  // is queued ahead of it; returns b back (not posted) otherwise.
  std::unique_ptr<InflightBatch> TryPostInline(std::unique_ptr<InflightBatch> b);
  void Wake();

  const EngineConfig config_;
  Clock& clock_;
  uint64_t engine_id_;

  // Progress thread only (after Start).
  std::array<ucp_context_h, kNumClasses> ctx_{};
  std::array<ucp_worker_h, kNumClasses> worker_{};
  std::array<std::string, kNumClasses> worker_addr_;  // written in Start, then read-only
  // The tcp segment sizes UCX uses in this process (TcpSegmentsInUse), 0 without tcp; written in
  // Start, then read-only. Sent in the HELLO and checked against each peer's (CheckTcpSegments).
  uint64_t tcp_tx_seg_ = 0;
  uint64_t tcp_rx_seg_ = 0;
  // Endpoints of this class are created without PEER error handling (shared-memory only).
  std::array<bool, kNumClasses> no_peer_failure_{};
  int epfd_ = -1;
  int wakefd_ = -1;  // eventfd: wakes the progress thread
  ByteBudget low_budget_;
  std::deque<std::unique_ptr<InflightBatch>> deferred_low_;
  std::vector<InflightBatch*> inflight_;  // owned; deleted in Finish
  size_t polled_in_flight_ = 0;           // batches of inflight_ with Batch::poll
  void AddInflight(InflightBatch* b) {
    inflight_.push_back(b);
    if (b->req.poll) ++polled_in_flight_;
  }
  size_t ops_outstanding_ = 0;
  // Notices (with their payloads) from engines not yet known.
  std::vector<std::pair<NoticeHeader, std::string>> early_notices_;
  std::unordered_map<uint64_t, std::shared_ptr<PeerState>> by_engine_id_;
  std::vector<std::shared_ptr<PeerState>> to_kill_;
  NoticeHandler notice_handler_;  // copied from notice_handler_shared_ on change
  std::thread progress_;
  std::atomic<bool> sleeping_{false};
  // Held by the progress thread except while it sleeps in epoll_wait; a submitter that gets it
  // (try_lock) may act as the progress thread for one batch (post_on_submit).
  std::mutex progress_mu_;
  std::atomic<bool> progress_waking_{false};  // left epoll_wait, about to take progress_mu_
  std::atomic<bool> stop_progress_{false};

  // Shared, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable peers_cv_;
  std::deque<std::function<void()>> tasks_;
  std::deque<std::unique_ptr<InflightBatch>> submitted_;
  std::atomic<bool> queued_{false};  // tasks_ or submitted_ non-empty (lock-free check)
  RegionIndex local_index_;
  std::map<uint32_t, LocalRegion> local_regions_;
  uint64_t local_generation_ = 0;
  uint32_t next_region_ = 1;
  uint32_t next_peer_ = 1;
  std::map<uint32_t, std::shared_ptr<PeerState>> peers_;
  size_t peers_ever_ = 0;
  NoticeHandler notice_handler_shared_;
  bool notice_handler_changed_ = false;

  // Control thread.
  std::unique_ptr<ControlListener> listener_;  // guarded by mu_ (set once)
  std::thread control_;
  int control_wakefd_ = -1;
  std::atomic<bool> stop_control_{false};

  // Stats (written by the progress thread, read anywhere).
  std::atomic<uint64_t> batches_completed_{0};
  std::atomic<uint64_t> sleeps_{0};  // Stats::progress_sleeps
  std::atomic<uint64_t> batches_failed_{0};
  std::atomic<uint64_t> ops_posted_{0};
  std::atomic<uint64_t> descs_posted_{0};
  std::atomic<uint64_t> low_in_flight_{0};
  std::atomic<uint64_t> low_in_flight_max_{0};
  std::atomic<uint64_t> low_deferred_{0};
  std::atomic<uint64_t> post_nanos_{0};
  std::atomic<uint64_t> posted_inline_{0};
};

// ucs_status_t → Status with UCX's description and `what` as context.
Status UcsStatus(ucs_status_t st, std::string_view what);

}  // namespace dualpath::transfer
