#include "dualpath/sim/simulator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <random>

#include "dualpath/common/check.h"
#include "dualpath/common/huge_pages.h"
#include "dualpath/common/numeric.h"
#include "dualpath/sim/event_queue.h"
#include "dualpath/sim/quad_heap.h"
#include "sim/cluster_state.h"
#include "sim/cost_model.h"
#include "sim/metrics.h"
#include "sim/sched_driver.h"
#include "sim/uniform.h"

namespace dualpath::sim {
namespace {

enum class ReadSide : uint8_t { kNone, kPe, kDe, kBoth };

enum EventKind : uint32_t {
  kFetch,        // every group fetches from the scheduler
  kArrive,       // a = agent, b = turn index (global)
  kReadDone,     // a = storage NIC (node), b = request slot
  kPrefillStep,  // a = prefill group
  kDecodeJoin,   // b = request slot
  kDecodeDone,   // a = decode group, b = group version
};

// A request in flight, split by use (issue 27): the request table is megabytes at 48K agents and
// nearly every event's first touch of a request misses the cache. `Req` is what the prefill and
// decode paths read, one cache line; `ReqLife` what only arrival, first token and completion
// read (the latency record). Byte counts are not stored: each is recomputed from its token count
// with the same multiplication the stored value came from, so every double is the same.
struct alignas(64) Req {
  uint64_t prompt = 0;
  uint64_t done_new = 0;  // prompt tokens past the hit prefilled so far
  uint32_t hit = 0, gen = 0;
  uint32_t pe = 0, de = 0;
  // Hit tokens read from storage: [0] on the PE side (forwarded to the DE with the first chunk),
  // [1] on the DE side. Each is at most the hit (a uint32_t).
  uint32_t read_tokens[2] = {0, 0};
  ReadSide side = ReadSide::kNone;
  bool sent_hit = false;  // PE read path: hit KV forwarded to the DE with the first chunk
  uint8_t reads_left = 0;
  // Arrival time: read with this record when the prefill ends (the first token's latency), where
  // the latency record is only written (issue 27: its load was a miss on every prefill end).
  double arrival = 0;
};
static_assert(sizeof(Req) == 64, "one cache line per request on the hot paths");

struct alignas(32) ReqLife {
  uint32_t agent = 0;
  uint32_t turn = 0;  // index into SimWorkload::turns
  double first_token = 0, ttst_time = 0;
};
static_assert(sizeof(ReqLife) == 32, "two latency records per cache line, none straddling");

// A read in service on a storage NIC: when it completes, its event's sequence number (reserved when
// it started, EventQueue::ReserveSeq) and its request.
struct ReadEnd {
  double time;
  uint64_t seq;
  uint32_t slot;
};

struct BatchEntry {
  uint32_t req;
  uint64_t n;  // new tokens computed in this forward
};

struct PeGroup {
  std::vector<uint32_t> pes;
  bool busy = false;
  std::vector<BatchEntry> batch;
};

// A request decoding in a group: the step it finishes at and its slot, as one 64-bit number
// (step << 32 | slot). Finish steps are whole numbers (a join step is a ceil, plus gen - 1), at
// least 1 and below 2^32 (checked where one is pushed), so the number orders as (step, slot) did:
// a total order (a slot is in at most one group's heap, once), and the pops are the same whatever
// the heap's shape. Eight bytes, not the 16 of a (double, slot, agent) record: the groups' heaps
// are half the memory, and a compare is one integer compare (issue 27).
struct DecodeEnd {
  uint64_t key;
  static DecodeEnd Of(double step, uint32_t slot) {
    return DecodeEnd{(static_cast<uint64_t>(step) << 32) | slot};
  }
  double step() const { return static_cast<double>(key >> 32); }
  uint32_t slot() const { return static_cast<uint32_t>(key); }
};
struct DecodeEndOrder {
  static bool Earlier(const DecodeEnd& x, const DecodeEnd& y) { return x.key < y.key; }
  static size_t EarlierBit(const DecodeEnd& x, const DecodeEnd& y) {
    return static_cast<size_t>(x.key < y.key);
  }
};

struct DeGroup {
  // Its DEs: indices [de_begin, de_end) of ClusterState::des (a group's DEs are consecutive:
  // BuildCluster numbers them node by node), so its members' step times are one slice of
  // de_step_time_, read without a list of ids (RetimeDecode, on every join and completion).
  uint32_t de_begin = 0, de_end = 0;
  double steps = 0;  // decode steps completed (fractional between events)
  double last_t = 0;
  double tau = 0;  // current step time
  // The largest step time of its DEs (de_step_time_, at least 0), or stale: then RetimeDecode
  // takes the maximum over the group's slice again (kept by UpdateDeStepTime: the slice was read
  // on every join and completion, 32 members, issue 27).
  double slowest = 0;
  bool slowest_stale = false;
  uint64_t version = 0;
  uint64_t batch = 0;  // requests in decode on the group's DEs: the sum of their DeState::batch
  // Decode time series: the batch (requests over the group's GPUs) and step time since `from`.
  double series_from = 0, series_batch = 0, series_tau = 0;
  // (finish step, request) min-heap. 4-ary and branch-free (quad_heap.h): std::priority_queue's
  // binary heap mispredicted on most levels of each pop (issue 27).
  QuadHeap<DecodeEnd, DecodeEndOrder> heap;
};

// One PE's share of a prefill forward batch: attention time, and KV bytes streamed into HBM and
// out to the DE (what the layerwise pipeline overlaps with compute).
struct PeStep {
  double attn = 0, load = 0, out = 0;
};

// One run: the cluster, its event loop, and the scheduler driven as a cluster's engines would
// (sched_driver.h). Metrics are recorded into SimMetrics (metrics.h) as events happen.
class Simulation {
 public:
  Simulation(const SimConfig& config, const kv::ModelGeometry& model, const SimWorkload& w,
             const RunSpec& spec)
      : cfg_(config),
        cost_(config, model),
        w_(w),
        spec_(spec),
        layerwise_(sched::PresetFor(spec.system).layerwise_prefill),
        moves_kv_(sched::MovesKv(spec.system)),
        pe_kv_tokens_(layerwise_ ? 0 : KvTokens(cost_.pe_kv_capacity_bytes(), cost_)),
        de_kv_tokens_(KvTokens(cost_.de_kv_capacity_bytes(), cost_)),
        attn_model_(FitAttentionModel(cost_)),
        rng_(spec.seed ^ 0x9e3779b97f4a7c15ULL),
        metrics_(config, spec.online) {}

  Result<SimResult> Run();

 private:
  void BuildCluster();
  Status StartScheduler();
  uint64_t StartAgents();
  Status Dispatch(const Event& e);
  void Prefetch(const Event* next) const;
  void PrefetchDecodeEnd(const DecodeEnd& e) const {
    __builtin_prefetch(&reqs_[e.slot()]);
    __builtin_prefetch(&lives_[e.slot()]);
  }
  bool Stalled(double now) const;
  Status Arrive(uint32_t agent, uint32_t turn, double now);
  Status Fetch(uint32_t group, double now);
  // After group `group`'s fetch tick: its next tick, or its timer stops when nothing is pending.
  void RearmFetch(uint32_t group, double now);
  Status PlacePrefill(const sched::Assignment& a, double now);
  // A per-request event (arrival, read done, decode join) or a fetch tick: the event heap.
  // Arrivals, one pending per thinking agent (tens of thousands), go to the queue's second heap,
  // so that the ticks, joins and reads walk a small one (EventQueue::PushDistant).
  void Push(double time, uint32_t kind, uint32_t a = 0, uint64_t b = 0) {
    if (kind != kFetch) ++work_events_;
    if (kind == kArrive) {
      q_.PushDistant(time, kind, a, b);
    } else {
      q_.Push(time, kind, a, b);
    }
  }
  // A prefill or decode group's event, at most one pending per timer (event_queue.h): its
  // forward's end, its next decode completion. Setting it again supersedes the pending one.
  // (Fetch ticks stay in the heap: 144 timers at 48P96D made each update a deeper tree walk than
  // the heap operation it replaced; measured, docs/sim.md.)
  void SetTimer(uint32_t timer, double time, uint32_t kind, uint32_t a, uint64_t b) {
    if (!q_.TimerPending(timer)) ++work_events_;
    q_.SetTimer(timer, time, kind, a, b);
  }
  uint32_t PrefillTimer(uint32_t pe_group) const { return pe_group; }
  uint32_t DecodeTimer(uint32_t de_group) const {
    return static_cast<uint32_t>(pe_groups_.size()) + de_group;
  }
  void AdmitReads(uint32_t nic, double now);
  // NIC `nic`'s earliest read completion popped: the next one enters the event queue.
  void NextReadDone(uint32_t nic);
  Status ReadDone(uint32_t slot, double now);
  Status KickPrefill(uint32_t group, double now);
  Status PlanPeStep(PeGroup& g, PeState& pe, const sched::BatchLimits& limits, PeStep* step,
                    double* tokens_total);
  Status FinishPrefillStep(uint32_t group, double now);
  void PrefillDone(uint32_t slot, double now);
  void DecodeJoin(uint32_t slot, double now);
  void DecodeDone(uint32_t group, uint64_t version, double now);
  void AdvanceDecode(DeGroup& g, double now);
  void AccumulateDecodeSeries(DeGroup& g, double now);
  void RetimeDecode(uint32_t group, double now);
  // Decode engine `di`'s batch sums changed: recompute its step time (de_step_time_).
  // Its group's slowest step time follows: a time at or above it is the new slowest; the slowest
  // one getting faster leaves it to RetimeDecode to find again (max is exact in any order).
  void UpdateDeStepTime(uint32_t di) {
    const DeState& d = c_.des[di];
    const double before = de_step_time_[di];
    const double now = cost_.DecodeGpuTime(d.flops, d.kv_bytes, d.batch);
    de_step_time_[di] = now;
    DeGroup& g = de_groups_[d.group];
    if (now >= g.slowest) {
      g.slowest = now;
    } else if (before == g.slowest) {
      g.slowest_stale = true;
    }
  }
  void Complete(uint32_t slot, double now);
  void NextTurn(uint32_t slot, double now);
  uint32_t NewReq();
  // Bytes of the read on `side` (0 PE, 1 DE) and the node whose storage NIC serves it.
  double ReadBytes(const Req& r, int side) const { return ReadBytesOf(r.read_tokens[side]); }
  double ReadBytesOf(uint32_t tokens) const {
    return static_cast<double>(tokens) * cost_.kv_bytes_per_token();
  }
  uint32_t ReadNic(const Req& r, int side) const {
    return side == 0 ? c_.pes[r.pe].node : c_.des[r.de].node;
  }
  // Per-step decode costs of the request, at its mean context during its decode: computed where
  // it joins and again where it completes (the same function of the same fields, so the same
  // doubles; not stored, which keeps the request record one line with its arrival time in it).
  double DecodeFlops(const Req& r) const { return cost_.DecodeFlopsPerStep(r.prompt + r.gen / 2); }
  double DecodeKv(const Req& r) const { return cost_.DecodeKvBytesPerStep(r.prompt + r.gen / 2); }
  // HBM a DE reserves for the request: prompt + generation KV.
  double DeHbm(const Req& r) const { return DeHbmOf(r.prompt + r.gen); }
  double DeHbmOf(uint64_t decode_tokens) const {
    return static_cast<double>(decode_tokens) * cost_.kv_bytes_per_token();
  }
  // Whole KV tokens in `bytes` of HBM; at least 1, so that a capacity below one token never reads
  // as "unbounded" (0) to PackBatch and sched::CheckTooLong.
  static int64_t KvTokens(double bytes, const CostModel& cost) {
    return std::max<int64_t>(1, static_cast<int64_t>(bytes / cost.kv_bytes_per_token()));
  }

  const SimConfig& cfg_;
  CostModel cost_;
  const SimWorkload& w_;
  RunSpec spec_;
  bool layerwise_;  // the system's preset: layerwise prefill (ablation step 1 on)
  bool moves_kv_;   // the Oracle rule (sched/system.h): false = no KV read or transfer
  // KV tokens one engine holds (sched::CheckTooLong): a PE without layerwise prefill holds its
  // whole batch's KV in HBM (0 = unbounded: layerwise holds one layer at a time); a DE reserves
  // prompt + generation for the request's whole decode.
  int64_t pe_kv_tokens_;
  int64_t de_kv_tokens_;
  sched::AttentionTimeModel attn_model_;
  std::unique_ptr<SchedDriver> driver_;
  std::vector<uint8_t> fetch_armed_;  // per scheduler group: its fetch timer is running (0/1)
  // Groups whose timer is not running. Under load every timer runs, and each arrival's scan of
  // all 144 groups (48P96D) for one to restart found none (issue 27).
  uint32_t fetch_unarmed_ = 0;
  uint64_t work_events_ = 0;   // pending events other than fetch ticks
  double last_placement_ = 0;  // last time a fetch placed anything (stall detection)
  std::mt19937_64 rng_;
  // A uniform double in [0, 1) from rng_: std::uniform_real_distribution<double>(0, 1)'s value
  // with libstdc++, computed faster and pinned (uniform.h).
  double Jitter() { return UniformFromBits(rng_()); }
  sched::FetchResult fetch_out_;  // the last fetch's decisions (SchedDriver::FetchGroup)
  std::vector<sched::PrefillWork> work_;
  sched::BatchPlan plan_;

  EventQueue q_;
  ClusterState c_;
  std::vector<PeGroup> pe_groups_;
  std::vector<DeGroup> de_groups_;
  // By request slot; in huge pages (common/huge_pages.h): each event reads a record at a place
  // unrelated to the last one's.
  HugePageVector<Req> reqs_;
  HugePageVector<ReqLife> lives_;
  std::vector<uint32_t> free_reqs_;
  std::vector<StorageNic::Started> started_;  // AdmitReads' scratch
  std::vector<uint32_t> due_;                 // DecodeDone's scratch: the requests completing
  // By storage NIC: its reads in service, in completion order, the first one's kReadDone in the
  // event queue. A NIC serves reads one after another (FIFO), so their completion times only
  // grow; keeping the rest out of the heap keeps it at one read per NIC (EventQueue::ReserveSeq).
  std::vector<std::deque<ReadEnd>> reads_in_service_;
  // By decode engine: cost_.DecodeGpuTime of its current decode batch sums (DeState batch, flops,
  // kv_bytes), recomputed when they change. RetimeDecode takes the group's maximum of these
  // instead of recomputing every member's (two divisions each, 32 members per group, on every
  // join and completion: issue 27). The same function of the same values, so the same doubles.
  std::vector<double> de_step_time_;
  SimMetrics metrics_;
};

// Nodes, their storage NICs and DRAM buffers, and the engines in their EP groups.
void Simulation::BuildCluster() {
  const uint32_t g = cfg_.hw.gpus_per_node;
  c_.prefill_nodes = spec_.shape.prefill_nodes;
  c_.decode_nodes = spec_.shape.decode_nodes;
  c_.gpus_per_node = g;
  c_.kv_bytes_per_token = cost_.kv_bytes_per_token();
  const uint32_t nodes = c_.prefill_nodes + c_.decode_nodes;
  // Each node's DRAM buffer serves as PE buffer (prefill nodes) or DE buffer (decode nodes).
  for (uint32_t n = 0; n < nodes; ++n) {
    c_.nics.emplace_back(cost_.snic_bytes_per_s(), cfg_.hw.dram_buffer_gb * 1e9,
                         cfg_.snic_window_s);
  }
  const uint32_t pe_group_nodes = std::min(cfg_.engine.pe_ep_nodes, c_.prefill_nodes);
  const uint32_t de_group_nodes = std::min(cfg_.engine.de_ep_nodes, c_.decode_nodes);
  for (uint32_t n = 0; n < c_.prefill_nodes; ++n) {
    const uint32_t group = n / pe_group_nodes;
    if (group >= pe_groups_.size()) pe_groups_.emplace_back();
    for (uint32_t i = 0; i < g; ++i) {
      PeState p;
      p.node = n;
      p.group = group;
      pe_groups_[group].pes.push_back(static_cast<uint32_t>(c_.pes.size()));
      c_.pes.push_back(std::move(p));
    }
  }
  for (uint32_t n = 0; n < c_.decode_nodes; ++n) {
    const uint32_t group = n / de_group_nodes;
    if (group >= de_groups_.size()) de_groups_.emplace_back();
    for (uint32_t i = 0; i < g; ++i) {
      DeState d;
      d.node = c_.DeNode(n);
      d.group = group;
      d.hbm_free = cost_.de_kv_capacity_bytes();
      DeGroup& dg = de_groups_[group];
      const auto index = static_cast<uint32_t>(c_.des.size());
      if (dg.de_begin == dg.de_end) {
        dg.de_begin = index;  // its first DE
      } else {
        DUALPATH_CHECK(dg.de_end == index, "a decode group's DEs are not consecutive");
      }
      dg.de_end = index + 1;
      c_.des.push_back(d);
    }
  }
  de_step_time_.assign(c_.des.size(), 0.0);  // DecodeGpuTime of an empty batch
  reads_in_service_.resize(nodes);
}

// The scheduler with the system's preset and the thresholds derived for this workload
// (sched_driver.h).
Status Simulation::StartScheduler() {
  const SchedThresholds thresholds = DeriveThresholds(cfg_, cost_, w_);
  ASSIGN_OR_RETURN(driver_, SchedDriver::Create(c_, spec_.system,
                                                SchedConfigFor(spec_.system, cfg_, thresholds)));
  fetch_armed_.assign(driver_->num_groups(), false);
  fetch_unarmed_ = driver_->num_groups();
  q_.ResizeTimers(pe_groups_.size() + de_groups_.size());
  // About one near event per calendar bucket: the fetch ticks are most of them, one per group
  // per interval on average (EventQueue::SetBucketWidth; the order does not depend on it).
  q_.SetBucketWidth(cfg_.sched.fetch_interval_ms * 1e-3 / (2.0 * driver_->num_groups()));
  return Status::Ok();
}

uint32_t Simulation::NewReq() {
  if (!free_reqs_.empty()) {
    uint32_t s = free_reqs_.back();
    free_reqs_.pop_back();
    reqs_[s] = Req{};
    lives_[s] = ReqLife{};
    return s;
  }
  reqs_.emplace_back();
  lives_.emplace_back();
  return static_cast<uint32_t>(reqs_.size() - 1);
}

Status Simulation::Arrive(uint32_t agent, uint32_t turn, double now) {
  const SimTurn& t = w_.turns[turn];
  uint32_t slot = NewReq();
  Req& r = reqs_[slot];
  ReqLife& life = lives_[slot];
  life.agent = agent;
  life.turn = turn;
  r.prompt = t.prompt;
  r.hit = t.hit;
  r.gen = t.gen;
  if (spec_.append_scale != 1) {
    const double extra = static_cast<double>(t.prompt - t.hit) * (spec_.append_scale - 1);
    r.prompt = std::max<uint64_t>(uint64_t{r.hit} + 1, static_cast<uint64_t>(r.prompt + extra));
  }
  r.arrival = now;
  // A request no engine can hold would wait forever (in sched's phase 2 for decode HBM, or in
  // PackBatch for prefill HBM): it is refused at once, as a serving engine refuses a prompt longer
  // than its maximum, counted, and the agent's session goes on (its next recorded turn).
  const sched::TooLong too_long = sched::CheckTooLong(
      static_cast<int64_t>(r.prompt), static_cast<int64_t>(r.gen), pe_kv_tokens_, de_kv_tokens_);
  if (too_long != sched::TooLong::kFits) {
    metrics_.TooLong(agent, too_long, now);
    NextTurn(slot, now);
    return Status::Ok();
  }
  // Routing: the turn's index within its agent picks a fixed PE (none for the dualpath choice).
  const SimAgent& sa = w_.agents[agent % w_.agents.size()];
  const std::optional<uint32_t> pe = sched::RoutedPrefillIndex(
      spec_.routing, agent, turn - sa.first_turn, static_cast<uint32_t>(c_.pes.size()));
  // The real hit: the driver applies the Oracle rule to what the scheduler sees.
  RETURN_IF_ERROR(driver_->Submit(slot, r.prompt, r.hit, r.gen, pe));
  last_placement_ = now;  // a new request restarts the stall clock
  // Idle groups restart their fetch timers. Leaders' timers are free-running and unsynchronized
  // in a real cluster, so the next tick of each after `now` is uniform over one interval (seeded).
  // A fixed stagger by group index (what this did before) made prefill group 0 the first to fetch
  // after every idle spell: it took the head of each burst and its node's storage NIC read ~20 %
  // more than the other prefill node's (snic max/avg 1.25 at 1,024 agents, docs/sim.md).
  const double interval = cfg_.sched.fetch_interval_ms * 1e-3;
  const auto groups = static_cast<uint32_t>(fetch_armed_.size());
  for (uint32_t g = 0; g < groups && fetch_unarmed_ > 0; ++g) {
    if (!fetch_armed_[g]) {
      fetch_armed_[g] = true;
      --fetch_unarmed_;
      Push(now + interval * Jitter(), kFetch, g);
    }
  }
  return Status::Ok();
}

// One group's leader fetches (docs/sched.md): DEs for a decode group, PEs + read side for a
// prefill group.
Status Simulation::Fetch(uint32_t group, double now) {
  RETURN_IF_ERROR(driver_->FetchGroup(group, c_, now, &fetch_out_));
  const std::vector<sched::DecodeAssignment>& decode_out = fetch_out_.decode;
  const std::vector<sched::Assignment>& prefill_out = fetch_out_.prefill;
  const auto num_pes = static_cast<uint32_t>(c_.pes.size());
  // The DE takes the request's decode tokens (prompt + generation, as submitted) from the
  // assignment: the request record, last touched at arrival, is not loaded here (its first touch
  // stalled this loop, issue 27); PlacePrefill records its DE.
  for (const sched::DecodeAssignment& d : decode_out) {
    DeState& de = c_.des[d.decode.value() - num_pes];
    de.tokens += static_cast<uint64_t>(d.tokens);
    de.requests++;
    de.hbm_free -= DeHbmOf(static_cast<uint64_t>(d.tokens));
  }
  // The requests a prefill fetch placed, last touched at arrival: start loading them all first.
  for (const sched::Assignment& a : prefill_out) __builtin_prefetch(&reqs_[a.request.value()], 1);
  for (const sched::Assignment& a : prefill_out) RETURN_IF_ERROR(PlacePrefill(a, now));
  RearmFetch(group, now);
  return Status::Ok();
}

void Simulation::RearmFetch(uint32_t group, double now) {
  if (driver_->HasPending()) {
    // Leaders' timers are not synchronized: each interval is jittered (+-50%, seeded) so no group
    // keeps a fixed place right after the decode groups' fetches, which would hand it the head
    // of every burst of newly DE-assigned requests.
    Push(now + cfg_.sched.fetch_interval_ms * 1e-3 * (0.5 + Jitter()), kFetch, group);
  } else {
    fetch_armed_[group] = false;
    ++fetch_unarmed_;
  }
}

// A complete assignment: the request joins its PE and starts its reads (or, reading nothing,
// waits for a forward batch right away).
Status Simulation::PlacePrefill(const sched::Assignment& a, double now) {
  const auto num_pes = static_cast<uint32_t>(c_.pes.size());
  const auto slot = static_cast<uint32_t>(a.request.value());
  const uint32_t pe_index = a.prefill.value();
  const uint32_t de_index = a.decode.value() - num_pes;  // the decode fetch's choice
  // sched reads at most the hit it was given (a uint32_t SimTurn::hit).
  const auto read_tokens = std::array<uint32_t, 2>{static_cast<uint32_t>(a.prefill_read_tokens),
                                                   static_cast<uint32_t>(a.decode_read_tokens)};
  // The request's record is only written here, from the assignment and locals (the prompt came
  // with the assignment as submitted): its line, last touched at arrival, is not waited for
  // (issue 27); the stores drain while the fetch goes on.
  Req& r = reqs_[slot];
  r.de = de_index;
  r.pe = pe_index;
  r.read_tokens[0] = read_tokens[0];
  r.read_tokens[1] = read_tokens[1];
  PeState& pe = c_.pes[pe_index];
  pe.tokens += static_cast<uint64_t>(a.prompt_tokens);
  pe.requests++;
  // ReadBytes(r, side) and ReadNic(r, side) without reading the record back.
  const std::array<double, 2> bytes = {ReadBytesOf(read_tokens[0]), ReadBytesOf(read_tokens[1])};
  const std::array<uint32_t, 2> nics = {pe.node, c_.des[de_index].node};
  const bool pe_read = bytes[0] > 0, de_read = bytes[1] > 0;
  r.side = pe_read && de_read ? ReadSide::kBoth
           : pe_read          ? ReadSide::kPe
           : de_read          ? ReadSide::kDe
                              : ReadSide::kNone;
  r.reads_left = static_cast<uint8_t>(int{pe_read} + int{de_read});
  if (!pe_read && !de_read) {
    pe.ready.push_back(slot);
    return KickPrefill(pe.group, now);
  }
  // Its reads queue on the storage NICs (PE side first), then each NIC admits what fits.
  for (int side = 0; side < 2; ++side) {
    if (bytes[side] > 0) c_.nics[nics[side]].Enqueue(now, slot, bytes[side]);
  }
  for (int side = 0; side < 2; ++side) {
    if (bytes[side] > 0) AdmitReads(nics[side], now);
  }
  return Status::Ok();
}

void Simulation::AdmitReads(uint32_t nic, double now) {
  // A member, not a local: a local vector allocated on every admission that started a read.
  started_.clear();
  c_.nics[nic].Admit(now, &started_);
  std::deque<ReadEnd>& fifo = reads_in_service_[nic];
  for (const auto& s : started_) {
    // The number a Push() here would take: the event pops where it did when every read was in
    // the heap.
    const uint64_t seq = q_.ReserveSeq();
    ++work_events_;
    DUALPATH_CHECK(fifo.empty() || fifo.back().time <= s.done_time,
                   "storage NIC reads completing out of order");
    fifo.push_back(ReadEnd{s.done_time, seq, static_cast<uint32_t>(s.tag)});
    if (fifo.size() == 1) q_.PushReserved(s.done_time, seq, kReadDone, nic, s.tag);
  }
}

void Simulation::NextReadDone(uint32_t nic) {
  std::deque<ReadEnd>& fifo = reads_in_service_[nic];
  fifo.pop_front();
  if (!fifo.empty()) {
    const ReadEnd& r = fifo.front();
    q_.PushReserved(r.time, r.seq, kReadDone, nic, r.slot);
    // Its ReadDone is a read's service time away, many events: start loading the request now
    // (the prefetch one event ahead, in Run, came too late to hide the miss: issue 27).
    __builtin_prefetch(&reqs_[r.slot]);
  }
}

Status Simulation::ReadDone(uint32_t slot, double now) {
  Req& r = reqs_[slot];
  if (--r.reads_left != 0) return Status::Ok();
  PeState& pe = c_.pes[r.pe];
  pe.ready.push_back(slot);
  return KickPrefill(pe.group, now);
}

// Forms one forward batch per PE of the group with sched::PackBatch (§6.2 FIFO packing under the
// compute quota, chunked prefill of the last request) and schedules the step's end. The step
// costs the exact FLOP-based time; the scheduler only saw its fitted estimate.
Status Simulation::KickPrefill(uint32_t gi, double now) {
  PeGroup& g = pe_groups_[gi];
  if (g.busy) return Status::Ok();
  g.batch.clear();
  const double link = cost_.kv_link_bytes_per_s();
  sched::BatchLimits limits;
  limits.compute_quota = static_cast<Nanos>(cfg_.engine.compute_quota_ms * 1e6);
  limits.min_chunk_tokens = cfg_.engine.block_tokens;
  // Without layerwise prefill the whole batch's KV (all layers) must sit in HBM.
  limits.max_batch_kv_tokens = pe_kv_tokens_;
  double max_attn = 0, sum_attn = 0, max_load = 0, max_out = 0, tokens_total = 0;
  for (uint32_t pi : g.pes) {
    PeState& pe = c_.pes[pi];
    if (pe.ready.empty()) continue;
    PeStep step;
    RETURN_IF_ERROR(PlanPeStep(g, pe, limits, &step, &tokens_total));
    max_attn = std::max(max_attn, step.attn);
    sum_attn += step.attn;
    max_load = std::max(max_load, step.load);
    max_out = std::max(max_out, step.out);
  }
  if (g.batch.empty()) return Status::Ok();
  const double members = static_cast<double>(g.pes.size());
  // Attention is data-parallel (each GPU its own requests); the MoE/GEMM part is spread over the
  // EP group, so every GPU waits for the slowest attention before the FFN of each layer.
  const double compute =
      max_attn + cost_.PrefillLinearTime(tokens_total / members) + cost_.ForwardOverhead();
  double duration;
  if (layerwise_) {
    // Layer i+1's KV streams in (and layer i's out to the DE) while layer i computes; the first
    // layer's load cannot overlap.
    const double link_time = std::max(max_load, max_out) / link;
    duration = std::max(compute, link_time) + max_load / link / cost_.layers();
  } else {
    duration = max_load / link + compute;  // all KV to HBM first, then compute
  }
  if (sum_attn > 0) metrics_.AttentionStep(now, max_attn / (sum_attn / members));
  g.busy = true;
  metrics_.PrefillStep(duration);
  SetTimer(PrefillTimer(gi), now + duration, kPrefillStep, gi, 0);
  return Status::Ok();
}

// One PE's part of the group's forward: packs its ready queue, appends the entries to the group's
// batch, and sums their attention time and KV traffic (none without KV movement: Oracle).
Status Simulation::PlanPeStep(PeGroup& g, PeState& pe, const sched::BatchLimits& limits,
                              PeStep* step, double* tokens_total) {
  // Only the prefix of the ready queue that PackBatch reads (sched::PackBatchPrefix): a long
  // ready queue was read in full on every step, a cache miss per request (issue 27).
  RETURN_IF_ERROR(sched::PackBatchPrefix(
      pe.ready.size(),
      [&](size_t i) {
        const Req& r = reqs_[pe.ready[i]];
        return sched::PrefillWork{static_cast<int64_t>(r.hit + r.done_new),
                                  static_cast<int64_t>(r.prompt - r.hit - r.done_new)};
      },
      attn_model_, limits, &work_, &plan_));
  const double kvb = cost_.kv_bytes_per_token();
  for (const sched::BatchEntry& e : plan_.entries) {
    const uint32_t slot = pe.ready[e.index];
    const Req& r = reqs_[slot];
    const uint64_t cached = r.hit + r.done_new;
    const auto n = static_cast<uint64_t>(e.bsz);
    g.batch.push_back(BatchEntry{slot, n});
    step->attn += cost_.PrefillAttentionTime(cached, n);
    *tokens_total += static_cast<double>(n);
    if (moves_kv_) {
      // Layer KV of the cached tokens streams into HBM from a buffer (PE's own, or the DE's
      // over the compute network); new KV, and PE-read hit KV once, streams out to the DE.
      step->load += static_cast<double>(cached) * kvb;
      step->out += static_cast<double>(n) * kvb;
      if (!r.sent_hit) step->out += static_cast<double>(r.read_tokens[0]) * kvb;
    }
  }
  return Status::Ok();
}

Status Simulation::FinishPrefillStep(uint32_t gi, double now) {
  PeGroup& g = pe_groups_[gi];
  g.busy = false;
  for (const BatchEntry& e : g.batch) {
    Req& r = reqs_[e.req];
    r.done_new += e.n;
    r.sent_hit = true;
    if (r.hit + r.done_new == r.prompt) {
      PeState& pe = c_.pes[r.pe];
      DUALPATH_CHECK(!pe.ready.empty() && pe.ready.front() == e.req,
                     "prefill completed out of FIFO order");
      pe.ready.pop_front();
      PrefillDone(e.req, now);
    }
  }
  g.batch.clear();
  return KickPrefill(gi, now);
}

void Simulation::PrefillDone(uint32_t slot, double now) {
  Req& r = reqs_[slot];
  ReqLife& life = lives_[slot];
  life.first_token = now;
  metrics_.FirstToken(r.arrival, now);
  PeState& pe = c_.pes[r.pe];
  pe.tokens -= r.prompt;
  pe.requests--;
  for (int side = 0; side < 2; ++side) {
    const double bytes = ReadBytes(r, side);
    if (bytes > 0) {
      const uint32_t nic = ReadNic(r, side);
      c_.nics[nic].Release(bytes);
      AdmitReads(nic, now);
    }
  }
  double delay = 0;
  if (moves_kv_) {
    const double bytes = static_cast<double>(r.prompt) * cost_.kv_bytes_per_token();
    // Layerwise: the prompt KV already streamed to the DE buffer during the forward. Otherwise it
    // is sent after prefill. Either way the DE copies it buffer -> HBM before decoding (§4.1).
    delay = (layerwise_ ? 0 : bytes / cost_.kv_link_bytes_per_s()) +
            bytes / cost_.kv_link_bytes_per_s();
  }
  Push(now + delay, kDecodeJoin, 0, slot);
}

void Simulation::AdvanceDecode(DeGroup& g, double now) {
  if (g.tau > 0) {
    g.steps += (now - g.last_t) / g.tau;
  }
  g.last_t = now;
}

void Simulation::AccumulateDecodeSeries(DeGroup& g, double now) {
  if (g.series_batch > 0 && now > g.series_from) {
    metrics_.DecodeInterval(g.series_from, now, g.series_batch, g.series_tau);
  }
  g.series_from = now;
}

void Simulation::RetimeDecode(uint32_t gi, double now) {
  DeGroup& g = de_groups_[gi];
  // The slowest member's step time: max is exact in any order, and each member's time is kept
  // current by UpdateDeStepTime. The batch was summed here as a double of integer counts (exact
  // below 2^53), the same value as the integer sum converted once.
  if (g.slowest_stale) {
    double slowest = 0;
    for (uint32_t di = g.de_begin; di < g.de_end; ++di)
      slowest = std::max(slowest, de_step_time_[di]);
    g.slowest = slowest;
    g.slowest_stale = false;
  }
  const double slowest = g.slowest;
  const auto batch = static_cast<double>(g.batch);
  g.tau = slowest > 0 ? slowest + cost_.decode_overhead_s() : 0;
  g.version++;
  // The series' interval up to `now` was accumulated by the caller (AccumulateDecodeSeries).
  g.series_batch = batch;
  g.series_tau = g.tau;
  // The new version supersedes the pending completion event, if any (its handler would ignore it).
  if (!g.heap.empty()) {
    const DecodeEnd& next = g.heap.top();
    const double left = std::max(0.0, next.step() - g.steps);
    SetTimer(DecodeTimer(gi), now + left * g.tau, kDecodeDone, gi, g.version);
    // The group's next completion touches these records, each last used long ago: start loading
    // them now, many events ahead (issue 27; the agent's sums are batched: SimMetrics::FlushDone).
    PrefetchDecodeEnd(next);
  } else if (q_.CancelTimer(DecodeTimer(gi))) {
    --work_events_;
  }
}

void Simulation::DecodeJoin(uint32_t slot, double now) {
  Req& r = reqs_[slot];
  if (r.gen <= 1) {
    lives_[slot].ttst_time = now;
    Complete(slot, now);
    return;
  }
  DeState& d = c_.des[r.de];
  DeGroup& g = de_groups_[d.group];
  AdvanceDecode(g, now);
  AccumulateDecodeSeries(g, now);
  d.batch++;
  d.flops += DecodeFlops(r);
  d.kv_bytes += DecodeKv(r);
  g.batch++;
  UpdateDeStepTime(r.de);
  const double join = std::ceil(g.steps - 1e-9);
  const double finish = join + static_cast<double>(r.gen - 1);
  DUALPATH_CHECK(finish >= 1 && finish < 0x1p32, "decode finish step outside [1, 2^32)");
  g.heap.push(DecodeEnd::Of(finish, slot));
  RetimeDecode(d.group, now);
  lives_[slot].ttst_time = now + (join - g.steps + 1) * g.tau;
}

void Simulation::DecodeDone(uint32_t gi, uint64_t version, double now) {
  DeGroup& g = de_groups_[gi];
  // A retime replaces the pending event (EventQueue::SetTimer), so a stale version never fires;
  // kept as the invariant's check.
  if (version != g.version) return;
  AdvanceDecode(g, now);
  AccumulateDecodeSeries(g, now);
  // Every request due at this step leaves the heap first, and its records start loading, before
  // the first is completed: they were last touched at their join, long ago, and one after another
  // each miss stalled the loop (issue 27). Completing touches no decode heap, so the requests
  // complete in the same order as when each was popped just before its completion.
  due_.clear();
  while (!g.heap.empty() && g.heap.top().step() <= g.steps + 1e-6) {
    const DecodeEnd& e = g.heap.top();
    PrefetchDecodeEnd(e);  // the first was prefetched when the event was timed; a hint
    due_.push_back(e.slot());
    g.heap.pop();
  }
  // NextTurn's read of each one's agent record, started once its latency record is in.
  for (const uint32_t slot : due_) {
    __builtin_prefetch(&w_.agents[lives_[slot].agent % w_.agents.size()]);
  }
  for (const uint32_t slot : due_) {
    Req& r = reqs_[slot];
    DeState& d = c_.des[r.de];
    d.batch--;
    d.flops -= DecodeFlops(r);
    d.kv_bytes -= DecodeKv(r);
    if (d.batch == 0) {
      d.flops = 0;  // no drift when empty
      d.kv_bytes = 0;
    }
    g.batch--;
    UpdateDeStepTime(r.de);
    if (r.gen > 2) {
      metrics_.Tpot((now - lives_[slot].ttst_time) / static_cast<double>(r.gen - 2));
    }
    Complete(slot, now);
  }
  RetimeDecode(gi, now);
}

void Simulation::Complete(uint32_t slot, double now) {
  Req& r = reqs_[slot];
  const ReqLife& life = lives_[slot];
  metrics_.RequestDone(life.agent, r.arrival, life.first_token, life.ttst_time, now, r.gen);
  DeState& d = c_.des[r.de];
  d.tokens -= r.prompt + r.gen;
  d.requests--;
  d.hbm_free += DeHbm(r);
  driver_->DecodeEngineChanged(static_cast<uint32_t>(c_.pes.size()) + r.de);
  NextTurn(slot, now);
}

// The request in `slot` is answered (served or refused) at `now`: frees the slot and sends the
// agent's next turn, or ends the agent.
void Simulation::NextTurn(uint32_t slot, double now) {
  const ReqLife& r = lives_[slot];
  const SimAgent& a = w_.agents[r.agent % w_.agents.size()];
  const uint32_t next = r.turn + 1;
  const uint32_t agent = r.agent;
  free_reqs_.push_back(slot);
  if (next < a.first_turn + a.num_turns) {
    const SimTurn& t = w_.turns[next];
    const double at = t.arrival_s >= 0 ? std::max(now, t.arrival_s) : now + t.think_s;
    Push(at, kArrive, agent, next);
  } else {
    metrics_.AgentDone(agent, now);
  }
}

// Queues every agent's first arrival (online: Poisson arrivals at spec.aps) and returns the
// requests the run must complete.
uint64_t Simulation::StartAgents() {
  const size_t num_agents =
      spec_.online && spec_.online_agents > 0 ? spec_.online_agents : w_.agents.size();
  uint64_t expected_requests = 0;
  metrics_.InitAgents(num_agents);
  std::mt19937_64 rng(spec_.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  // Start skew: its own stream, so a skew of 0 draws nothing and changes no other draw. 53 bits
  // per uniform by hand (std::uniform_real_distribution's algorithm is not pinned).
  std::mt19937_64 skew_rng(spec_.seed ^ 0x5bd1e9955bd1e995ULL);
  const double skew = spec_.online ? 0.0 : cfg_.offline_start_skew_s;
  double t = 0;
  double last_start = 0;
  for (uint32_t i = 0; i < num_agents; ++i) {
    const SimAgent& a = w_.agents[i % w_.agents.size()];
    expected_requests += a.num_turns;
    double start = a.start_s;
    if (spec_.online) {
      t += -std::log(1.0 - uni(rng)) / spec_.aps;  // Poisson arrivals
      start = t;
    }
    if (skew > 0) start += skew * static_cast<double>(skew_rng() >> 11) * 0x1.0p-53;
    const SimTurn& first = w_.turns[a.first_turn];
    if (first.arrival_s >= 0) start = first.arrival_s;
    start += first.think_s;
    AgentPath& path = metrics_.agent(i);
    path.agent = i;
    path.turns = a.num_turns;
    path.start_s = start;
    last_start = start;
    Push(start, kArrive, i, a.first_turn);
  }
  if (spec_.online && num_agents > 0) metrics_.SetSteadyWindow(0.5 * last_start, last_start);
  reqs_.reserve(std::min<size_t>(num_agents, 1 << 20) + 16);
  lives_.reserve(reqs_.capacity());
  metrics_.ReserveRequests(expected_requests);
  return expected_requests;
}

// Starts loading what the next event will touch while the current one runs. The request table
// is megabytes at 48K agents and each event reaches a request last touched long ago: without
// this, the first access to it was the largest single cost of a 48P96D run. Only a hint: the
// current event may push an earlier one, or grow reqs_ (a stale address is harmless to prefetch).
void Simulation::Prefetch(const Event* next) const {
  if (next == nullptr) return;
  // Req is one aligned line; the latency record only where the handler reads it.
  const auto prefetch_req = [this](uint64_t slot) { __builtin_prefetch(&reqs_[slot]); };
  const auto prefetch_life = [this](uint64_t slot) { __builtin_prefetch(&lives_[slot]); };
  switch (next->kind) {
    case kReadDone:
      prefetch_req(next->b);
      break;
    case kDecodeJoin:
      prefetch_req(next->b);
      prefetch_life(next->b);
      break;
    case kPrefillStep:
      // PrefillDone reads the latency record of each request the step finishes.
      for (const BatchEntry& be : pe_groups_[next->a].batch) {
        prefetch_req(be.req);
        prefetch_life(be.req);
      }
      break;
    case kDecodeDone: {
      const DeGroup& g = de_groups_[next->a];
      if (next->b == g.version && !g.heap.empty()) PrefetchDecodeEnd(g.heap.top());
      break;
    }
    case kArrive:
      __builtin_prefetch(&w_.turns[next->b]);
      if (!free_reqs_.empty()) {
        prefetch_req(free_reqs_.back());
        prefetch_life(free_reqs_.back());
      }
      break;
    default:
      break;
  }
}

Status Simulation::Dispatch(const Event& e) {
  const double now = e.time;
  switch (e.kind) {
    case kFetch:
      return Fetch(e.a, now);
    case kArrive:
      return Arrive(e.a, static_cast<uint32_t>(e.b), now);
    case kReadDone:
      return ReadDone(static_cast<uint32_t>(e.b), now);
    case kPrefillStep:
      return FinishPrefillStep(e.a, now);
    case kDecodeJoin:
      DecodeJoin(static_cast<uint32_t>(e.b), now);
      return Status::Ok();
    case kDecodeDone:
      DecodeDone(e.a, e.b, now);
      return Status::Ok();
    default:
      return Internal("unknown event kind");
  }
}

// Fetch timers re-arm while requests are pending. If every group has fetched without placing
// anything, no engine holds work and only timers are left, nothing can change: a stall.
bool Simulation::Stalled(double now) const {
  if (work_events_ != 0 || !driver_->HasPending() ||
      now - last_placement_ <= 2 * cfg_.sched.fetch_interval_ms * 1e-3) {
    return false;
  }
  for (const DeState& d : c_.des) {
    if (d.requests > 0) return false;
  }
  for (const PeState& p : c_.pes) {
    if (p.requests > 0) return false;
  }
  return true;
}

Result<SimResult> Simulation::Run() {
  BuildCluster();
  RETURN_IF_ERROR(StartScheduler());
  const uint64_t expected_requests = StartAgents();
  while (!q_.Empty()) {
    const Event e = q_.Pop();
    if (e.kind == kReadDone) NextReadDone(e.a);  // before Peek: it may be the next event
    Prefetch(q_.Peek());
    if (e.kind == kFetch && driver_->SkipIdleFetch(e.a)) {
      // Half of a 48P96D run's ticks: a fetch that would change nothing (SchedDriver::IdleFetch)
      // only takes its next tick, as Fetch would after it (issue 27).
      RearmFetch(e.a, e.time);
      if (Stalled(e.time)) break;
      continue;
    }
    if (e.kind != kFetch) --work_events_;
    RETURN_IF_ERROR(Dispatch(e));
    if (e.kind != kFetch) continue;
    if (!fetch_out_.decode.empty() || !fetch_out_.prefill.empty()) last_placement_ = e.time;
    if (Stalled(e.time)) break;
  }
  const uint64_t answered = metrics_.requests_done() + metrics_.too_long().requests;
  if (answered != expected_requests) {
    return Status(Code::kSimBadConfig,
                  "simulation stalled: " + std::to_string(expected_requests - answered) +
                      " requests never ran");
  }
  SimResult result = metrics_.Collect(std::string(SystemName(spec_.system)), c_,
                                      cost_.snic_bytes_per_s(), q_.Processed() + q_.Superseded());
  result.too_long.prefill_capacity_tokens = pe_kv_tokens_;
  result.too_long.decode_capacity_tokens = de_kv_tokens_;
  return result;
}

}  // namespace

Result<SimResult> Simulate(const SimConfig& config, const kv::ModelGeometry& model,
                           const SimWorkload& workload, const RunSpec& spec) {
  RETURN_IF_ERROR(config.Validate());
  if (workload.agents.empty()) {
    return InvalidArgument("empty workload");
  }
  if (spec.online && !(spec.aps > 0 && std::isfinite(spec.aps))) {
    return InvalidArgument("online mode needs an arrival rate > 0 agents/s");
  }
  // Per-GPU state is the simulator's other size besides the workload: bounded like the inputs
  // (docs/sim.md "Input ranges"; the paper's largest cluster has 1,152 GPUs).
  const uint64_t gpus =
      (uint64_t{spec.shape.prefill_nodes} + spec.shape.decode_nodes) * config.hw.gpus_per_node;
  RETURN_IF_ERROR(
      CheckCountRange("GPUs (--pd nodes x hardware.gpus_per_node)", gpus, 1, kMaxSimGpus, "GPUs"));
  if (model.KvBytesPerToken() == 0 || model.num_layers == 0) {
    return InvalidArgument("model " + model.name + " has no KV geometry");
  }
  // Per-model engine constants for this cluster shape (docs/sim.md).
  ASSIGN_OR_RETURN(SimConfig resolved,
                   ResolveEngine(config, model, spec.shape.prefill_nodes, spec.shape.decode_nodes));
  Simulation sim(resolved, model, workload, spec);
  return sim.Run();
}

}  // namespace dualpath::sim
