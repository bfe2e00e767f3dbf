// ControlState: everything the scheduler service knows, behind one mutex. The gRPC handlers of
// SchedulerService are thin wrappers around these methods (which speak proto messages but no
// gRPC), so the logic reads top to bottom here.
//
// Request life cycle (RequestState::phase):
//   kQueued   submitted (or re-submitted) and inside sched::Scheduler, not yet a full assignment;
//             it may already have a decode assignment (advisory, see docs/control.md)
//   kAssigned handed to a prefill engine in a complete Assignment; in flight on its PE and DE
//   kDeferred an engine reported the attempt failed; re-submitted (as the next attempt) once both
//             engines of the failed attempt have started a new Fetch, or died. A PE whose DE was
//             killed fails fast; re-submitting at once could pick the same dead DE (it is not yet
//             declared dead) and burn every attempt within milliseconds. Waiting for a fresh Fetch
//             costs a live engine one round trip: its long poll is "pinged" (returns empty) so it
//             fetches again at once.
//   kDone     its result (ok, or failed after max_attempts) is in results_
// A request's `attempt` grows each time it is re-submitted; results of an older attempt are stale
// and dropped, so an engine declared dead that still reports cannot produce a duplicate result.
//
// The sched::Scheduler covers the live registered engines only, with dense ids; it is rebuilt
// (RebuildLocked) whenever that set changes (all expected engines registered, an engine died or
// re-registered), re-submitting every kQueued request in submission order. Rebuilding instead of
// patching keeps the pure scheduler unaware of failures.
//
// Liveness has two parts (docs/control.md "Liveness"): an engine that stops fetching for 3
// heartbeats is dead (its process, or its link to the service, is gone); an engine the others
// cannot reach over the compute network while they reach each other (DataReach, from the probes
// the engines report with every Fetch) is cut off: still registered and fetching, but out of the
// scheduler (no work, its in-flight requests re-submitted) until a probe reaches it again.
//
// Thread safety: all public methods may be called from any thread; one mutex guards the state and
// one condition variable wakes long polls (Fetch, WaitResults) and WaitFinished on any change.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/data_reach.h"
#include "control/hit_probe.h"
#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/control/options.h"
#include "dualpath/control/service.h"
#include "dualpath/control/v1/scheduler.pb.h"
#include "dualpath/model/ref_model.h"
#include "dualpath/sched/scheduler.h"

namespace dualpath::control {

class ControlState {
 public:
  // `probe` (never null) hashes each submitted prompt once and finds its hit.
  ControlState(const ServiceOptions& options, const model::RefModelConfig& model,
               std::unique_ptr<HitProbe> probe);
  ~ControlState();

  Result<v1::RegisterEngineReply> Register(const v1::EngineInfo& info);
  Status Fetch(const v1::FetchRequest& request, v1::FetchReply* reply);
  // Returns the hit tokens found.
  Result<int64_t> Submit(const v1::RequestSpec& spec);
  Status Report(const v1::RequestResult& result);
  void WaitResults(const v1::WaitResultsRequest& request, v1::WaitResultsReply* reply);
  void ListEngines(v1::ListEnginesReply* reply);
  void Shutdown();
  // Placement mode (ServiceOptions::placement; FailedPrecondition otherwise). Place submits the
  // request to sched and runs the decode and prefill passes until it is assigned (its own or
  // earlier callers' requests first: sched's FIFO), waiting up to wait_ms for reports or other
  // requests' ends to free capacity; then it withdraws the request and returns kUnavailable.
  Result<v1::Assignment> Place(const v1::PlaceRequest& request);
  Status ReportEngines(const v1::ReportEnginesRequest& request, v1::ReportEnginesReply* reply);

  int CheckLiveness();
  void Stop();
  bool Finished() const;
  bool WaitFinished(std::chrono::milliseconds timeout) const;
  ServiceStats stats() const;
  const ServiceOptions& options() const { return options_; }
  // This incarnation's random non-zero epoch (scheduler.proto, RegisterEngineReply).
  uint64_t epoch() const { return epoch_; }

 private:
  enum class Phase { kQueued, kAssigned, kDeferred, kDone };
  static constexpr uint32_t kNone = UINT32_MAX;

  struct EngineState {
    v1::EngineInfo info;
    ExpectedEngine expected;  // from the list (name empty in count mode)
    bool registered = false;
    bool alive = false;
    // Reachable over the compute network (DataReach): false while cut off. Scheduled only when
    // registered, alive and reachable.
    bool reachable = true;
    Nanos cut_at = 0;  // when it was last cut off (service clock)
    bool saw_shutdown = false;
    bool ping = false;  // a deferred retry waits for this engine: end its current poll early
    int in_poll = 0;    // Fetch calls of this engine in progress: alive by definition
    Nanos last_seen = 0;
    sched::EngineReport last_report;             // engine field unused (mapped at apply time)
    int64_t capacity_tokens = 0;                 // reported buffer size in tokens (0: unknown)
    std::set<uint64_t> in_flight;                // request ids assigned to it as PE or DE
    std::vector<v1::Assignment> pending_decode;  // decode assignments not yet fetched
  };

  struct RequestState {
    v1::RequestSpec spec;
    int64_t hit_tokens = 0;
    std::string prompt_block_hashes;  // HitProbe's chain, sent in every prefill assignment
    uint32_t attempt = 0;
    Phase phase = Phase::kQueued;
    uint32_t prefill = kNone;  // service engine ids while kAssigned
    uint32_t decode = kNone;
    // The fixed prefill engine (service id) the routing gave it when it was last handed to sched;
    // kNone: the normal choice.
    uint32_t routed = kNone;
    std::vector<uint32_t> waiting_for;  // kDeferred: engines that must fetch again first
    // kDeferred after a peer failure: the failed attempt's PE and DE, whose link must be judged
    // first (LinkJudgedLocked), and when the failure was reported. kNone: no such wait.
    uint32_t link_a = kNone, link_b = kNone;
    Nanos link_failed_at = 0;
    v1::Assignment placed;       // placement mode: the assignment, once kAssigned
    bool place_waiting = false;  // placement mode: a Place call waits for it (it owns the erase)
    std::string error;           // kDone by failure: why
  };

  // All *Locked methods require mu_.
  Result<uint32_t> FindSlotLocked(const v1::EngineInfo& info);
  void RebuildLocked();
  // Hands a kQueued request to sched, or fails it (kDone, failed result) when no live engine of
  // a role could ever hold it (see UnplaceableLocked).
  void SubmitToSchedLocked(uint64_t request_id);
  // Why `st` can never be placed: every live engine of a role has reported its capacity and
  // none holds the request (prefill: its prompt; decode: prompt + gen). Empty when it may fit.
  std::string UnplaceableLocked(const RequestState& st) const;
  // True when some kQueued request is unplaceable now (capacities or the engine set changed).
  bool AnyQueuedUnplaceableLocked() const;
  // The routing's fixed prefill engine (service id) for `st`, or kNone: routing dualpath, a retry
  // (attempt > 0), a fixed engine that is not live, or one whose reported capacity is below the
  // prompt. See ServiceOptions::routing.
  uint32_t RoutedEngineLocked(const RequestState& st) const;
  // True when some kQueued request is fixed to an engine RoutedEngineLocked would no longer give
  // it (its capacity arrived and is too small): a rebuild re-submits it without.
  bool AnyQueuedMisroutedLocked() const;
  void RunDecodePhaseLocked();
  void RunPrefillFetchLocked(uint32_t engine, v1::FetchReply* reply);
  // Placement mode: the prefill group's pass (every live prefill instance is in it); each
  // assignment is kept in its request's `placed` for the Place call waiting for it.
  void RunPlacementLocked();
  // Records sched's decision for its request (kAssigned, engines' in-flight sets, stats) and
  // returns the complete Assignment the engines (or the proxy) receive.
  v1::Assignment AssignLocked(const sched::Assignment& s);
  Status ApplyReportsLocked(const google::protobuf::RepeatedPtrField<v1::EngineReport>& reports,
                            const char* rpc);
  int CheckLivenessLocked();
  // Cuts off the engines DataReach finds unreachable over the compute network (re-submitting
  // their in-flight requests) and takes back those reachable again; rebuilds the scheduler when
  // the set changed. Part of CheckLivenessLocked.
  void CheckReachLocked(Nanos now);
  // Registered engines that fetch (alive), reachable or not: what DataReach judges.
  std::vector<uint32_t> LiveEnginesLocked() const;
  // FetchReply.peers for engine `id`: the live engines of the other role.
  void AddPeersLocked(uint32_t id, v1::FetchReply* reply) const;
  // The request's attempt failed (why): re-submit, or forward a failed result once attempts are
  // exhausted. `result` is the engine's failed result, or null when the service decided.
  // `defer`: wait for the failed attempt's engines to fetch again (see kDeferred). `link_failed`
  // (with defer): the engines reported a peer failure between them; also wait for a verdict on
  // their link (LinkJudgedLocked). Without it a PE whose compute link is down but which is not
  // cut off yet fails each attempt within milliseconds, looks idle, draws the retry again and
  // burns every attempt before the cut-off (replay_store_fault_comp-link, 1 run in ~4).
  void RetryOrFailLocked(uint64_t request_id, const std::string& why,
                         const v1::RequestResult* result, bool defer, bool link_failed = false);
  // Ends the request (kDone) with a failed result: `result` (the engine's) if given, its error
  // defaulting to `why`. The caller has released its engines.
  void FailLocked(uint64_t request_id, const std::string& why, const v1::RequestResult* result);
  // Engine `engine` proved alive (a new Fetch or registration) or died: deferred requests stop
  // waiting for it, and those waiting for nobody are re-submitted.
  // `engine` fetched again (or died): deferred retries stop waiting for it, and those with
  // nothing left to wait for are re-submitted. kNone: only the link verdicts are looked at again
  // (the periodic liveness check).
  void ReleaseDeferredLocked(uint32_t engine);
  // A deferred retry after a peer failure may go ahead: either engine of the failed pair is dead
  // or cut off, a probe between them was answered after the failure (the link works), or the
  // reachability window has passed since the failure (no verdict came: retry anyway).
  bool LinkJudgedLocked(const RequestState& st, Nanos now) const;
  void ReleaseInFlightLocked(RequestState& st, uint64_t request_id);
  // Placement mode: a request that is done is forgotten (a proxy runs for days; nobody collects
  // placed requests' results), unless a Place call still waits for it.
  void ForgetIfPlacedLocked(uint64_t request_id);
  // "live instances: 1 prefill, 0 decode" (placement's error messages).
  std::string LiveSummaryLocked() const;
  void PushResultLocked(v1::RequestResult result);
  bool AllExpectedRegisteredLocked() const;
  bool FinishedLocked() const;

  const ServiceOptions options_;
  const model::RefModelConfig model_;
  const uint64_t epoch_;
  const Clock* clock_;
  sched::SchedConfig sched_config_;
  std::unique_ptr<HitProbe> probe_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<EngineState> engines_;  // index = service engine id
  DataReach reach_;                   // window: 3 heartbeats
  // Changes whenever the set of live engines does (FetchReply.peers_version); never 0.
  uint64_t peers_version_ = 1;
  bool started_ = false;  // every expected engine has registered once
  bool shutdown_ = false;
  bool stopping_ = false;
  std::unique_ptr<sched::Scheduler> sched_;
  // Placement mode: the sched group holding every live prefill instance (kNone: none live).
  uint32_t placement_group_ = kNone;
  std::vector<uint32_t> sched_to_engine_;  // sched EngineId -> service engine id
  std::vector<uint32_t> engine_to_sched_;  // service engine id -> sched EngineId (kNone: out)
  std::unordered_map<uint64_t, RequestState> requests_;
  std::vector<uint64_t> order_;               // request ids in submission order
  std::set<uint64_t> deferred_;               // request ids in kDeferred
  std::vector<v1::SequencedResult> results_;  // results_[i].seq == i + 1
  sched::FetchResult scratch_;
  ServiceStats stats_;
};

}  // namespace dualpath::control
