#include "dualpath/replay/replayer.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <set>

namespace dualpath::replay {
namespace {

// An in-process stand-in for the scheduler service (test double): every submitted request
// "runs" for a fixed virtual time and its result is delivered by WaitResults. Time is a
// ManualClock that WaitResults advances, so the test is deterministic and never sleeps.
class FakeService final : public ServiceClient {
 public:
  explicit FakeService(ManualClock& clock) : clock_(clock) {}

  Result<int64_t> Submit(const pb::RequestSpec& spec) override {
    if (fail_submit_) return Unavailable("fake: service gone");
    if (down_calls_ > 0) return Down();
    // Closed loop: turn t of an agent only after turn t-1's result was delivered.
    const uint64_t agent = spec.agent_id();
    if (spec.turn() > 0 && delivered_turns_[agent].count(spec.turn() - 1) == 0) {
      ADD_FAILURE() << "agent " << agent << " turn " << spec.turn()
                    << " submitted before its previous turn's result";
    }
    if (!ids_.insert(spec.request_id()).second) {
      // Submit is idempotent per id (as the service's): only a restart makes the replayer repeat.
      EXPECT_GT(restarts_, 0) << "duplicate id " << spec.request_id();
      return static_cast<int64_t>(spec.prompt_size() / 64 * 64);
    }
    submit_times_.push_back({agent, spec.turn(), clock_.Now()});
    pending_.push_back({spec, clock_.Now()});
    return static_cast<int64_t>(spec.prompt_size() / 64 * 64);
  }

  Result<std::vector<pb::SequencedResult>> WaitResults(uint64_t after_seq,
                                                       uint32_t wait_ms) override {
    if (down_calls_ > 0) return Down();
    std::vector<pb::SequencedResult> out;
    if (after_seq > seq_ && restarts_ > 0) {
      // Asked with the old incarnation's position: nothing here yet (the real service waits).
      clock_.Advance(static_cast<Nanos>(wait_ms) * kNanosPerMilli);
      return out;
    }
    EXPECT_EQ(after_seq, seq_) << "the replayer must ask for results after the last one seen";
    if (pending_.empty() || never_answer_) {
      clock_.Advance(static_cast<Nanos>(wait_ms) * kNanosPerMilli);  // the long poll times out
      return out;
    }
    // Every pending request finishes `run_ns` after its submission.
    clock_.Advance(run_ns_);
    while (!pending_.empty()) {
      const auto [spec, submitted] = pending_.front();
      pending_.pop_front();
      pb::SequencedResult sr;
      sr.set_seq(++seq_);
      pb::RequestResult* r = sr.mutable_result();
      r->set_request_id(spec.request_id());
      const bool fail = fail_agent_turn_ == std::make_pair(spec.agent_id(), spec.turn());
      r->set_ok(!fail);
      if (fail) r->set_error("fake failure");
      for (uint32_t j = 0; j < spec.gen_tokens(); ++j) r->add_generated(j);
      pb::Timing* t = r->mutable_timing();
      t->set_submitted_ns(submitted);
      t->set_prefill_start_ns(submitted + 10 * kNanosPerMilli);
      t->set_first_token_ns(submitted + 30 * kNanosPerMilli);
      t->set_second_token_ns(submitted + 35 * kNanosPerMilli);
      t->set_done_ns(submitted + 30 * kNanosPerMilli +
                     5 * kNanosPerMilli * (spec.gen_tokens() - 1));
      delivered_turns_[spec.agent_id()].insert(spec.turn());
      out.push_back(std::move(sr));
      if (++delivered_ == restart_after_) {
        // Killed here: the rest of what is pending is lost with the process, and the service
        // answers nothing for `down_for_` calls, then comes back empty under a new epoch.
        pending_.clear();
        ids_.clear();
        seq_ = 0;
        ++epoch_;
        ++restarts_;
        down_calls_ = down_for_;
        return out;
      }
    }
    return out;
  }

  uint64_t epoch() const override { return epoch_; }
  Status WaitForService(Nanos timeout) override {
    clock_.Advance(timeout);  // the connection attempt times out in virtual time
    return Status::Ok();
  }
  Status Down() {
    --down_calls_;
    return Unavailable("fake: service restarting");
  }

  struct SubmitTime {
    uint64_t agent;
    uint32_t turn;
    Nanos t;
  };
  ManualClock& clock_;
  Nanos run_ns_ = 100 * kNanosPerMilli;
  bool fail_submit_ = false;
  bool never_answer_ = false;
  uint64_t epoch_ = 7;
  int restarts_ = 0;
  size_t delivered_ = 0;
  size_t restart_after_ = 0;  // 0: never
  int down_for_ = 0;
  int down_calls_ = 0;
  std::pair<uint64_t, uint32_t> fail_agent_turn_{~0ull, 0};
  uint64_t seq_ = 0;
  std::deque<std::pair<pb::RequestSpec, Nanos>> pending_;
  std::map<uint64_t, std::set<uint32_t>> delivered_turns_;
  std::set<uint64_t> ids_;
  std::vector<SubmitTime> submit_times_;
};

ReplayWorkload SmallWorkload() {
  WorkloadOptions o;
  o.agents = 3;
  o.turns = 4;
  o.max_context = 512;
  o.gen = 4;
  Result<ReplayWorkload> w = BuildWorkload(o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return *w;
}

TEST(ReplayerTest, OfflineClosedLoopRunsEveryTurnInOrder) {
  const ReplayWorkload w = SmallWorkload();
  ManualClock clock(1'000 * kNanosPerSecond);
  FakeService svc(clock);
  Result<ReplayResult> r = RunReplay(w, ReplayOptions{}, svc, clock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), w.requests);
  // Offline: every agent's first turn goes out at the start, before any result.
  size_t first_turns_at_start = 0;
  for (const auto& s : svc.submit_times_) {
    if (s.turn == 0 && s.t == r->start_ns) ++first_turns_at_start;
  }
  EXPECT_EQ(first_turns_at_start, w.agents.size());
  // Each round of the fake takes 100 ms; the longest agent needs one round per turn.
  size_t max_turns = 0;
  for (const Agent& a : w.agents) max_turns = std::max(max_turns, a.turns.size());
  EXPECT_EQ(r->end_ns - r->start_ns, static_cast<Nanos>(max_turns) * 100 * kNanosPerMilli);
  for (const RequestRecord& rec : r->records) {
    EXPECT_TRUE(rec.result.ok());
    EXPECT_DOUBLE_EQ(rec.TtftS(), 0.030);
    if (rec.gen_tokens > 1) {
      EXPECT_DOUBLE_EQ(rec.TtstS(), 0.005);
      EXPECT_NEAR(rec.TpotS(), 0.005, 1e-12);
    } else {
      EXPECT_EQ(rec.TpotS(), 0);
    }
    EXPECT_DOUBLE_EQ(rec.QueueS(), 0.010);
    EXPECT_EQ(rec.hit_tokens, static_cast<int64_t>(rec.prompt_tokens / 64 * 64));
  }
  // The steady state starts with the last second turn and ends with the first finished agent.
  EXPECT_GT(r->steady_start_ns, r->start_ns);
  EXPECT_GT(r->steady_end_ns, r->steady_start_ns);
}

TEST(ReplayerTest, OnlineAgentsArriveOverTime) {
  const ReplayWorkload w = SmallWorkload();
  ManualClock clock(1'000 * kNanosPerSecond);
  FakeService svc(clock);
  ReplayOptions o;
  o.online = true;
  o.aps = 2.0;
  o.seed = 7;
  Result<ReplayResult> r = RunReplay(w, o, svc, clock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), w.requests);
  std::vector<Nanos> first_submit;
  for (const auto& s : svc.submit_times_) {
    if (s.turn == 0) first_submit.push_back(s.t);
  }
  ASSERT_EQ(first_submit.size(), w.agents.size());
  // Arrivals are strictly spread out (Poisson), in agent order.
  for (size_t i = 1; i < first_submit.size(); ++i) EXPECT_GT(first_submit[i], first_submit[i - 1]);
  // Same seed, same arrivals.
  ManualClock clock2(1'000 * kNanosPerSecond);
  FakeService svc2(clock2);
  ASSERT_TRUE(RunReplay(w, o, svc2, clock2).ok());
  for (size_t i = 0; i < svc.submit_times_.size(); ++i) {
    EXPECT_EQ(svc.submit_times_[i].t, svc2.submit_times_[i].t);
  }
  o.aps = 0;
  EXPECT_EQ(RunReplay(w, o, svc2, clock2).status().code(), Code::kInvalidArgument);
}

TEST(ReplayerTest, FailedRequestIsRecordedAndAgentGoesOn) {
  const ReplayWorkload w = SmallWorkload();
  ManualClock clock;
  FakeService svc(clock);
  svc.fail_agent_turn_ = {w.agents[1].id, 0};
  Result<ReplayResult> r = RunReplay(w, ReplayOptions{}, svc, clock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), w.requests);
  size_t failed = 0;
  for (const RequestRecord& rec : r->records) failed += rec.result.ok() ? 0 : 1;
  EXPECT_EQ(failed, 1u);
}

TEST(ReplayerTest, ErrorsAndTimeoutAreReported) {
  const ReplayWorkload w = SmallWorkload();
  ManualClock clock;
  FakeService svc(clock);
  svc.fail_submit_ = true;
  EXPECT_EQ(RunReplay(w, ReplayOptions{}, svc, clock).status().code(), Code::kUnavailable);

  FakeService silent(clock);
  silent.never_answer_ = true;
  ReplayOptions o;
  o.timeout_s = 5;
  Result<ReplayResult> r = RunReplay(w, o, silent, clock);
  EXPECT_EQ(r.status().code(), Code::kTimeout);
  EXPECT_NE(r.status().message().find("in flight"), std::string::npos);
}

// Issue 19: a replay whose service never answers (its engines were killed by `cluster down`)
// ends as soon as the health check fails, long before the replay timeout, with that status.
TEST(ReplayerTest, FailedHealthCheckEndsTheReplayAtOnce) {
  const ReplayWorkload w = SmallWorkload();
  ManualClock clock;
  FakeService silent(clock);
  silent.never_answer_ = true;
  ReplayOptions o;
  o.timeout_s = 600;
  int checks = 0;
  o.health = [&]() -> Status {
    return ++checks < 3 ? Status::Ok() : Unavailable("engine d0 (basic) exited (signal 9)");
  };
  const Nanos start = clock.Now();
  Result<ReplayResult> r = RunReplay(w, o, silent, clock);
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("engine d0"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(checks, 3);
  // Two long polls of poll_ms each, not the 600 s timeout.
  EXPECT_LE(clock.Now() - start, 2 * o.poll_ms * kNanosPerMilli);
}

// Issue 17: the service is killed after 4 results and restarted (new epoch, nothing kept). The
// replayer waits for it, re-submits what it had in flight under the same ids and reads results
// from the new incarnation's start: every request gets exactly one record, none is lost.
TEST(ReplayerTest, ServiceRestartReSubmitsInFlightRequestsAndLosesNone) {
  const ReplayWorkload w = SmallWorkload();
  ManualClock clock(1'000 * kNanosPerSecond);
  FakeService svc(clock);
  svc.restart_after_ = 4;
  svc.down_for_ = 3;
  std::vector<uint64_t> seen;
  ReplayOptions o;
  o.on_result = [&](const RequestRecord& r) { seen.push_back(r.request_id); };
  Result<ReplayResult> r = RunReplay(w, o, svc, clock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), w.requests);
  std::set<uint64_t> ids;
  for (const RequestRecord& rec : r->records) {
    EXPECT_TRUE(rec.result.ok());
    EXPECT_TRUE(ids.insert(rec.request_id).second) << "request " << rec.request_id << " twice";
  }
  EXPECT_EQ(seen.size(), r->records.size());  // on_result saw every result once
  EXPECT_EQ(r->service_restarts, 1);
  // 3 agents, 4 results delivered in the round that ended with the kill: what was in flight then
  // (the 3 next turns submitted in that round, minus none delivered) was re-submitted.
  EXPECT_GT(r->resubmitted, 0);
}

// A service that stays away longer than service_outage_s fails the replay naming the outage.
TEST(ReplayerTest, ServiceThatDoesNotComeBackFailsTheReplay) {
  const ReplayWorkload w = SmallWorkload();
  ManualClock clock(1'000 * kNanosPerSecond);
  FakeService svc(clock);
  svc.restart_after_ = 2;
  svc.down_for_ = 1'000'000;
  ReplayOptions o;
  o.service_outage_s = 5;
  Result<ReplayResult> r = RunReplay(w, o, svc, clock);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("did not answer for 5"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace dualpath::replay
