// ControlState: registration, (re)building the sched::Scheduler, liveness, shutdown. Fetch lives in
// state_fetch.cc, Submit/Report/WaitResults in state_requests.cc.
#include "control/state.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string_view>
#include <utility>

#include "dualpath/common/check.h"
#include "dualpath/common/log.h"
#include "dualpath/sched/types.h"

namespace dualpath::control {
namespace {

// The initial free-HBM view of a decode engine that registered without hbm_tokens.
constexpr int64_t kUndeclaredHbmTokens = int64_t{1} << 40;

// The system's preset (sched::PresetFor; --split-reads makes dualpath dualpath-split) with the
// service's thresholds and block size.
sched::SchedConfig MakeSchedConfig(const ServiceOptions& o) {
  const bool split = o.split_reads && o.system == SystemKind::kDualPath;
  sched::SchedConfig c = sched::PresetFor(split ? SystemKind::kDualPathSplit : o.system);
  if (o.short_read_queue_tokens > 0) c.short_read_queue_tokens = o.short_read_queue_tokens;
  if (o.unfinished_token_limit > 0) c.unfinished_token_limit = o.unfinished_token_limit;
  c.block_tokens = o.block_tokens;
  return c;
}

// A random non-zero epoch per service process: a restarted service must differ from the one
// before it, so a clock (which a restart within the same tick would repeat) is not enough.
uint64_t DrawEpoch() {
  std::random_device rd;
  uint64_t e = 0;
  while (e == 0) e = (uint64_t{rd()} << 32) ^ rd();
  return e;
}

sched::Role ToSchedRole(v1::Role role) {
  return role == v1::ROLE_DECODE ? sched::Role::kDecode : sched::Role::kPrefill;
}

}  // namespace

ControlState::ControlState(const ServiceOptions& options, const model::RefModelConfig& model,
                           std::unique_ptr<HitProbe> probe)
    : options_(options),
      model_(model),
      epoch_(DrawEpoch()),
      clock_(options.clock != nullptr ? options.clock : &SteadyClock::Default()),
      sched_config_(MakeSchedConfig(options)),
      probe_(std::move(probe)),
      // The same allowance as for fetches: 3 heartbeats without contact over the compute network.
      reach_(FromSeconds(3 * options.heartbeat_s)) {
  DUALPATH_CHECK(probe_ != nullptr, "ControlState needs a HitProbe (it hashes every prompt)");
  // Named list: slots exist from the start, engine id = list position.
  for (const ExpectedEngine& e : options_.engines) {
    EngineState s;
    s.expected = e;
    engines_.push_back(std::move(s));
  }
}

ControlState::~ControlState() = default;

bool ControlState::AllExpectedRegisteredLocked() const {
  if (static_cast<int>(engines_.size()) < options_.expected_engines()) return false;
  return std::all_of(engines_.begin(), engines_.end(),
                     [](const EngineState& e) { return e.registered; });
}

Result<uint32_t> ControlState::FindSlotLocked(const v1::EngineInfo& info) {
  const sched::Role role = ToSchedRole(info.role());
  if (!options_.engines.empty()) {
    for (uint32_t i = 0; i < engines_.size(); ++i) {
      const ExpectedEngine& e = engines_[i].expected;
      if (e.name != info.name()) continue;
      if (e.role != role) {
        return InvalidArgument(fmt::format("register: engine {} has role {}, expected {}",
                                           info.name(), sched::RoleName(role),
                                           sched::RoleName(e.role)));
      }
      if (e.node != info.node()) {
        return InvalidArgument(fmt::format("register: engine {} is on node '{}', expected '{}'",
                                           info.name(), info.node(), e.node));
      }
      return i;
    }
    std::string names;
    for (const EngineState& e : engines_) names += (names.empty() ? "" : ",") + e.expected.name;
    return InvalidArgument(
        fmt::format("register: unexpected engine '{}' (expected: {})", info.name(), names));
  }
  // Count mode: a known name re-registers; a new name takes the next slot while its role has room.
  int of_role = 0;
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    if (engines_[i].info.name() == info.name()) {
      if (ToSchedRole(engines_[i].info.role()) != role) {
        return InvalidArgument(fmt::format("register: engine {} re-registered with role {}",
                                           info.name(), sched::RoleName(role)));
      }
      return i;
    }
    of_role += ToSchedRole(engines_[i].info.role()) == role ? 1 : 0;
  }
  const int limit =
      role == sched::Role::kPrefill ? options_.expect_prefill : options_.expect_decode;
  if (of_role >= limit) {
    return InvalidArgument(
        fmt::format("register: engine '{}': already {} {} engines of {} expected", info.name(),
                    of_role, sched::RoleName(role), limit));
  }
  engines_.emplace_back();
  return static_cast<uint32_t>(engines_.size() - 1);
}

Result<v1::RegisterEngineReply> ControlState::Register(const v1::EngineInfo& info) {
  if (info.name().empty()) return InvalidArgument("register: engine name is empty");
  if (info.role() != v1::ROLE_PREFILL && info.role() != v1::ROLE_DECODE) {
    return InvalidArgument(
        fmt::format("register: engine {} has no role (prefill or decode)", info.name()));
  }
  if (info.hbm_tokens() < 0) {
    return InvalidArgument(
        fmt::format("register: engine {} hbm_tokens {} < 0", info.name(), info.hbm_tokens()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_ || stopping_) return FailedPrecondition("register: the run is shut down");
  ASSIGN_OR_RETURN(uint32_t id, FindSlotLocked(info));
  EngineState& e = engines_[id];
  bool rebuild = started_;
  if (e.registered && e.alive) {
    // A live engine registering again restarted: whatever its old incarnation held is gone.
    log::Warn("control: engine {} re-registered; re-submitting its {} in-flight requests",
              info.name(), e.in_flight.size());
    const std::vector<uint64_t> lost(e.in_flight.begin(), e.in_flight.end());
    for (uint64_t rid : lost)
      RetryOrFailLocked(rid, "engine " + info.name() + " restarted", nullptr, false);
  }
  e.info = info;
  e.registered = true;
  e.alive = true;
  // A (re-)registered process: judged afresh over the compute network, after a grace period.
  e.reachable = true;
  reach_.Forget(id);
  ++peers_version_;  // a new engine, or a new address for the peers that probe it
  e.saw_shutdown = false;
  e.last_seen = clock_->Now();
  e.last_report = sched::EngineReport{};
  e.last_report.hbm_free_tokens = info.hbm_tokens();
  e.capacity_tokens = 0;  // a (re-)registered process: unknown until its first report
  if (info.role() == v1::ROLE_DECODE && info.hbm_tokens() == 0) {
    // Undeclared capacity: do not block scheduling before the engine's first report.
    e.last_report.hbm_free_tokens = kUndeclaredHbmTokens;
    log::Warn(
        "control: decode engine {} registered without hbm_tokens; assuming unlimited until "
        "it reports hbm_free_tokens",
        info.name());
  }
  e.pending_decode.clear();
  e.ping = false;
  ReleaseDeferredLocked(id);
  log::Info("control: registered engine {} id={} role={} node={} peer={} hbm_tokens={}",
            info.name(), id, sched::RoleName(ToSchedRole(info.role())), info.node(),
            info.peer_addr(), info.hbm_tokens());
  if (options_.placement) {
    // Placement schedules over whichever instances are live: every registration changes the set.
    rebuild = true;
  }
  if (!started_ && (options_.placement || AllExpectedRegisteredLocked())) {
    started_ = true;
    rebuild = true;
    if (options_.placement) {
      log::Info("control: placement ({}): scheduling over the live registered instances",
                SystemName(options_.system));
    } else {
      log::Info("control: all {} expected engines registered; scheduling ({})", engines_.size(),
                SystemName(options_.system));
    }
  }
  if (rebuild) RebuildLocked();
  cv_.notify_all();

  v1::RegisterEngineReply reply;
  reply.set_engine_id(id);
  reply.set_group_id(id);  // each engine is its own group
  reply.set_system(std::string(SystemName(options_.system)));
  // Canonical form (every key): engines compare it with their own config.
  reply.set_model_spec(model_.ToString());
  reply.set_block_tokens(options_.block_tokens);
  reply.set_heartbeat_s(options_.heartbeat_s);
  reply.set_hash_algo(options_.hash_algo);
  reply.set_hash_seed(options_.hash_seed);
  reply.set_service_epoch(epoch_);
  return reply;
}

void ControlState::RebuildLocked() {
  ++stats_.rebuilds;
  sched_.reset();
  sched_to_engine_.clear();
  engine_to_sched_.assign(engines_.size(), kNone);
  // Undelivered decode assignments are re-decided by the new scheduler.
  for (EngineState& e : engines_) e.pending_decode.clear();

  sched::ClusterDesc cluster;
  placement_group_ = kNone;
  // Placement mode: every live prefill instance in sched group 0, so that one prefill pass picks
  // among all of them by §6.1's categories (no instance fetches for its own group); decode
  // instances keep a group each (phase 1 balances tokens across them). Group ids stay dense.
  uint32_t next_group = 0;
  if (options_.placement) {
    for (const EngineState& e : engines_) {
      if (e.registered && e.alive && e.info.role() == v1::ROLE_PREFILL) {
        placement_group_ = next_group++;
        break;
      }
    }
  }
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    const EngineState& e = engines_[i];
    // A cut-off engine (unreachable over the compute network) gets no work until it is reachable.
    if (!e.registered || !e.alive || !e.reachable) continue;
    const uint32_t sid = static_cast<uint32_t>(cluster.engines.size());
    // One engine per sched node (see options.h); one per group, except placement's prefill group.
    const bool shared = options_.placement && e.info.role() == v1::ROLE_PREFILL;
    const uint32_t group = shared ? placement_group_ : next_group++;
    cluster.engines.push_back(sched::EngineDesc{EngineId(sid), ToSchedRole(e.info.role()),
                                                NodeId(sid), sched::GroupId(group)});
    sched_to_engine_.push_back(i);
    engine_to_sched_[i] = sid;
  }
  auto created = sched::Scheduler::Create(cluster, sched_config_);
  if (!created.ok()) {
    // No live prefill or no live decode engine: requests wait until one (re-)registers.
    log::Error("control: cannot schedule with the live engines: {}", created.status().ToString());
    sched_to_engine_.clear();
    engine_to_sched_.assign(engines_.size(), kNone);
    return;
  }
  sched_ = std::move(created).value();
  std::vector<sched::EngineReport> reports;
  for (uint32_t sid = 0; sid < sched_to_engine_.size(); ++sid) {
    sched::EngineReport r = engines_[sched_to_engine_[sid]].last_report;
    r.engine = EngineId(sid);
    reports.push_back(r);
  }
  Status st = sched_->ApplyReports(reports);
  DUALPATH_CHECK(st.ok(), st.ToString());  // stored reports were validated when received
  for (uint64_t rid : order_) {
    if (requests_.at(rid).phase == Phase::kQueued) SubmitToSchedLocked(rid);
  }
}

std::string ControlState::UnplaceableLocked(const RequestState& st) const {
  const int64_t prompt = st.spec.prompt_size();
  const auto gen = static_cast<int64_t>(st.spec.gen_tokens());
  const v1::Role roles[2] = {v1::ROLE_PREFILL, v1::ROLE_DECODE};
  // The largest live engine of each role; 0 (unbounded for sched::CheckTooLong) while none is
  // live or some live one has not reported its capacity: the request may fit there.
  int64_t largest[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    bool unknown = false;
    for (const EngineState& e : engines_) {
      if (!e.registered || !e.alive || e.info.role() != roles[k]) continue;
      unknown |= e.capacity_tokens <= 0;
      largest[k] = std::max(largest[k], e.capacity_tokens);
    }
    if (unknown) largest[k] = 0;
  }
  // The one rule the simulator applies too (sched/types.h).
  const sched::TooLong too_long = sched::CheckTooLong(prompt, gen, largest[0], largest[1]);
  if (too_long == sched::TooLong::kFits) return "";
  const int k = too_long == sched::TooLong::kPrefill ? 0 : 1;
  const std::string_view name = sched::TooLongName(too_long);
  return fmt::format(
      "request {} needs {} tokens of {} engine buffer ({}) but the largest live {} engine holds {} "
      "(raise the engines' --buffer-mib / --hbm-tokens)",
      st.spec.request_id(), k == 0 ? prompt : prompt + gen, name,
      k == 0 ? fmt::format("prompt {}", prompt) : fmt::format("prompt {} + gen {}", prompt, gen),
      name, largest[k]);
}

bool ControlState::AnyQueuedUnplaceableLocked() const {
  for (uint64_t rid : order_) {
    const RequestState& st = requests_.at(rid);
    if (st.phase == Phase::kQueued && !UnplaceableLocked(st).empty()) return true;
  }
  return false;
}

uint32_t ControlState::RoutedEngineLocked(const RequestState& st) const {
  if (options_.routing == sched::Routing::kDualPath || st.attempt > 0) return kNone;
  // Every prefill engine in service id order, live or not: P must not change when one dies, or
  // every agent's turns would move.
  std::vector<uint32_t> prefill;
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    const EngineState& e = engines_[i];
    const bool is_prefill = options_.engines.empty() ? e.info.role() == v1::ROLE_PREFILL
                                                     : e.expected.role == sched::Role::kPrefill;
    if (is_prefill) prefill.push_back(i);
  }
  const std::optional<uint32_t> index = sched::RoutedPrefillIndex(
      options_.routing, st.spec.agent_id(), st.spec.turn(), static_cast<uint32_t>(prefill.size()));
  if (!index.has_value()) return kNone;
  const uint32_t id = prefill[*index];
  const EngineState& e = engines_[id];
  if (!e.registered || !e.alive || engine_to_sched_.size() <= id || engine_to_sched_[id] == kNone) {
    return kNone;
  }
  if (e.capacity_tokens > 0 && st.spec.prompt_size() > e.capacity_tokens) return kNone;
  return id;
}

bool ControlState::AnyQueuedMisroutedLocked() const {
  for (uint64_t rid : order_) {
    const RequestState& st = requests_.at(rid);
    if (st.phase == Phase::kQueued && st.routed != kNone && RoutedEngineLocked(st) != st.routed) {
      return true;
    }
  }
  return false;
}

void ControlState::SubmitToSchedLocked(uint64_t request_id) {
  RequestState& st = requests_.at(request_id);
  if (std::string why = UnplaceableLocked(st); !why.empty()) {
    log::Error("control: {}; failing it", why);
    ReleaseInFlightLocked(st, request_id);
    FailLocked(request_id, why, nullptr);
    return;
  }
  if (sched_ == nullptr) return;  // submitted at the next rebuild
  sched::SchedRequest r;
  r.id = RequestId(request_id);
  r.session = SessionId(st.spec.agent_id());
  r.prompt_tokens = st.spec.prompt_size();
  // The Oracle rule (sched/system.h): the scheduler sees no hit tokens to place; the engines still
  // get the real hit with the assignment (state_fetch.cc).
  r.hit_tokens = sched::SchedHitTokens(options_.system, st.hit_tokens);
  r.expected_gen_tokens = st.spec.gen_tokens();
  st.routed = RoutedEngineLocked(st);
  if (st.routed != kNone) r.prefill_engine = EngineId(engine_to_sched_[st.routed]);
  Status s = sched_->Submit(r);
  DUALPATH_CHECK(s.ok(), s.ToString());  // the spec was validated at Submit
}

int ControlState::CheckLiveness() {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckLivenessLocked();
}

int ControlState::CheckLivenessLocked() {
  if (!started_ || stopping_) return 0;
  const Nanos now = clock_->Now();
  const Nanos limit = FromSeconds(3 * options_.heartbeat_s);
  int dead = 0;
  for (EngineState& e : engines_) {
    if (!e.registered || !e.alive || e.in_poll > 0 || now - e.last_seen <= limit) continue;
    e.alive = false;
    ++peers_version_;  // its peers stop probing it
    ++dead;
    ++stats_.engines_dead;
    if (shutdown_) {
      // The run is over: nothing to re-submit, but the run is finished without this engine.
      log::Warn("control: engine {} ({}) died before it saw shutdown", e.info.name(),
                e.info.node());
      continue;
    }
    log::Error(
        "control: engine {} ({}) declared dead: no fetch for {:.3f} s (limit {:.3f} s); "
        "re-submitting its {} in-flight requests",
        e.info.name(), e.info.node(), ToSeconds(now - e.last_seen), ToSeconds(limit),
        e.in_flight.size());
    const std::vector<uint64_t> lost(e.in_flight.begin(), e.in_flight.end());
    for (uint64_t rid : lost) {
      RetryOrFailLocked(rid, "engine " + e.info.name() + " died", nullptr, false);
    }
    ReleaseDeferredLocked(static_cast<uint32_t>(&e - engines_.data()));
  }
  if (dead > 0) {
    if (!shutdown_) RebuildLocked();
    cv_.notify_all();
  }
  if (!shutdown_) {
    CheckReachLocked(now);
    // Deferred retries waiting on a link verdict: a probe answered since, or the window passed.
    if (!deferred_.empty()) ReleaseDeferredLocked(kNone);
  }
  return dead;
}

std::vector<uint32_t> ControlState::LiveEnginesLocked() const {
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    if (engines_[i].registered && engines_[i].alive) live.push_back(i);
  }
  return live;
}

void ControlState::CheckReachLocked(Nanos now) {
  const std::vector<uint32_t> live = LiveEnginesLocked();
  const std::vector<uint32_t> cut = reach_.CutOff(live, now);
  bool changed = false;
  // The engines a cut-off one must reach again both ways before it is taken back (the live ones
  // not cut off themselves): DataReach::BackSince.
  std::vector<uint32_t> others;
  for (uint32_t id : live) {
    if (std::find(cut.begin(), cut.end(), id) == cut.end()) others.push_back(id);
  }
  for (uint32_t id : live) {
    EngineState& e = engines_[id];
    bool reachable = std::find(cut.begin(), cut.end(), id) == cut.end();
    if (reachable && !e.reachable) reachable = reach_.BackSince(id, others, e.cut_at);
    if (reachable == e.reachable) continue;
    changed = true;
    e.reachable = reachable;
    if (reachable) {
      ++stats_.engines_reconnected;
      log::Warn("control: engine {} ({}) reachable again over the compute network; scheduling it",
                e.info.name(), e.info.node());
      continue;
    }
    ++stats_.engines_cut_off;
    e.cut_at = now;
    const std::optional<Nanos> last = reach_.LastContact(id, live);
    log::Error(
        "control: engine {} ({}) cut off: unreachable over the compute network ({}; limit {:.3f} "
        "s) while other engines reach each other; re-submitting its {} in-flight requests",
        e.info.name(), e.info.node(),
        last ? fmt::format("last reached {:.3f} s ago", ToSeconds(now - *last))
             : std::string("never reached"),
        ToSeconds(reach_.window()), e.in_flight.size());
    // Its requests cannot finish (their KV cannot move): the next attempt goes elsewhere, and
    // whatever the old attempt still reports is stale.
    const std::vector<uint64_t> lost(e.in_flight.begin(), e.in_flight.end());
    for (uint64_t rid : lost) {
      RetryOrFailLocked(rid, "engine " + e.info.name() + " unreachable over the compute network",
                        nullptr, false);
    }
    ReleaseDeferredLocked(id);
  }
  if (changed) {
    RebuildLocked();
    cv_.notify_all();
  }
}

void ControlState::AddPeersLocked(uint32_t id, v1::FetchReply* reply) const {
  const v1::Role mine = engines_[id].info.role();
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    const EngineState& e = engines_[i];
    if (i == id || !e.registered || !e.alive || e.info.role() == mine) continue;
    v1::PeerEngine* p = reply->add_peers();
    p->set_engine_id(i);
    p->set_name(e.info.name());
    p->set_peer_addr(e.info.peer_addr());
    p->set_transfer_addr(e.info.transfer_addr());
  }
  reply->set_peers_version(peers_version_);
}

void ControlState::ReleaseInFlightLocked(RequestState& st, uint64_t request_id) {
  for (uint32_t id : {st.prefill, st.decode}) {
    if (id != kNone) engines_[id].in_flight.erase(request_id);
  }
  st.prefill = kNone;
  st.decode = kNone;
}

void ControlState::RetryOrFailLocked(uint64_t request_id, const std::string& why,
                                     const v1::RequestResult* result, bool defer,
                                     bool link_failed) {
  RequestState& st = requests_.at(request_id);
  const uint32_t engines[] = {st.prefill, st.decode};
  ReleaseInFlightLocked(st, request_id);
  if (options_.placement) {
    // The proxy that placed it has answered its client with the error already; a retry is the
    // client's (or the proxy's) call, as a new request.
    log::Warn("control: placed request {} failed: {}", request_id, why);
    FailLocked(request_id, why, result);
    return;
  }
  if (st.attempt + 1 < options_.max_attempts) {
    ++st.attempt;
    ++stats_.resubmitted;
    st.waiting_for.clear();
    st.link_a = st.link_b = kNone;
    if (defer && link_failed && engines[0] != kNone && engines[1] != kNone) {
      st.link_a = engines[0];
      st.link_b = engines[1];
      st.link_failed_at = clock_->Now();
    }
    log::Warn("control: request {} attempt {} failed ({}); re-submitting as attempt {}{}",
              request_id, st.attempt - 1, why, st.attempt,
              st.link_a != kNone ? " once its engines fetch again and their link is judged"
              : defer            ? " once its engines fetch again"
                                 : "");
    if (defer) {
      for (uint32_t id : engines) {
        if (id == kNone || !engines_[id].alive) continue;
        if (std::find(st.waiting_for.begin(), st.waiting_for.end(), id) != st.waiting_for.end()) {
          continue;
        }
        st.waiting_for.push_back(id);
        engines_[id].ping = true;
      }
    }
    if (st.waiting_for.empty() && (st.link_a == kNone || LinkJudgedLocked(st, clock_->Now()))) {
      st.link_a = st.link_b = kNone;
      st.phase = Phase::kQueued;
      SubmitToSchedLocked(request_id);
    } else {
      st.phase = Phase::kDeferred;
      deferred_.insert(request_id);
      cv_.notify_all();  // the pings
    }
    return;
  }
  log::Error("control: request {} failed after {} attempts: {}", request_id, st.attempt + 1, why);
  FailLocked(request_id, why, result);
}

void ControlState::FailLocked(uint64_t request_id, const std::string& why,
                              const v1::RequestResult* result) {
  RequestState& st = requests_.at(request_id);
  st.phase = Phase::kDone;
  v1::RequestResult failed;
  if (result != nullptr) failed = *result;
  failed.set_request_id(request_id);
  failed.set_ok(false);
  if (failed.error().empty()) failed.set_error(why);
  failed.set_attempt(st.attempt);
  failed.set_hit_tokens(st.hit_tokens);
  ++stats_.failed;
  st.error = failed.error();
  if (options_.placement) {
    ForgetIfPlacedLocked(request_id);
    return;
  }
  PushResultLocked(std::move(failed));
}

void ControlState::ForgetIfPlacedLocked(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (!options_.placement || it == requests_.end() || it->second.place_waiting) return;
  requests_.erase(it);
  std::erase(order_, request_id);
}

std::string ControlState::LiveSummaryLocked() const {
  int prefill = 0;
  int decode = 0;
  for (const EngineState& e : engines_) {
    if (!e.registered || !e.alive) continue;
    (e.info.role() == v1::ROLE_PREFILL ? prefill : decode) += 1;
  }
  return fmt::format("live instances: {} prefill, {} decode", prefill, decode);
}

bool ControlState::LinkJudgedLocked(const RequestState& st, Nanos now) const {
  for (uint32_t id : {st.link_a, st.link_b}) {
    if (!engines_[id].alive || !engines_[id].reachable) return true;
  }
  return reach_.AnsweredAfter(st.link_a, st.link_b, st.link_failed_at) ||
         now - st.link_failed_at >= reach_.window();
}

void ControlState::ReleaseDeferredLocked(uint32_t engine) {
  const Nanos now = clock_->Now();
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    RequestState& st = requests_.at(*it);
    if (engine != kNone) std::erase(st.waiting_for, engine);
    if (!st.waiting_for.empty() || (st.link_a != kNone && !LinkJudgedLocked(st, now))) {
      ++it;
      continue;
    }
    st.link_a = st.link_b = kNone;
    st.phase = Phase::kQueued;
    SubmitToSchedLocked(*it);
    it = deferred_.erase(it);
    cv_.notify_all();
  }
}

void ControlState::PushResultLocked(v1::RequestResult result) {
  v1::SequencedResult sr;
  sr.set_seq(results_.size() + 1);
  *sr.mutable_result() = std::move(result);
  results_.push_back(std::move(sr));
  cv_.notify_all();
}

void ControlState::ListEngines(v1::ListEnginesReply* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t i = 0; i < engines_.size(); ++i) {
    const EngineState& e = engines_[i];
    if (!e.registered) continue;
    *reply->add_engines() = e.info;
    reply->add_engine_ids(i);
    reply->add_alive(e.alive);
    reply->add_reachable(e.reachable);
  }
}

void ControlState::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!shutdown_) log::Info("control: shutdown requested");
  shutdown_ = true;
  cv_.notify_all();
}

void ControlState::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
}

bool ControlState::FinishedLocked() const {
  if (!shutdown_) return false;
  return std::all_of(engines_.begin(), engines_.end(), [](const EngineState& e) {
    return !e.registered || !e.alive || e.saw_shutdown;
  });
}

bool ControlState::Finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return FinishedLocked();
}

bool ControlState::WaitFinished(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return FinishedLocked() || stopping_; });
  return FinishedLocked();
}

ServiceStats ControlState::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace dualpath::control
