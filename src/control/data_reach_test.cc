// DataReach, the service's judgement of the compute network from the engines' probe reports, on
// virtual time: every report and every judgement names its instant, nothing reads a clock.
#include "control/data_reach.h"

#include <gtest/gtest.h>

#include <vector>

namespace dualpath::control {
namespace {

constexpr Nanos kS = kNanosPerSecond;
constexpr Nanos kMs = kNanosPerMilli;
constexpr Nanos kWindow = 3 * kS;  // 3 heartbeats of 1 s
// 2P2D: p0, p1 prefill; d0, d1 decode.
constexpr uint32_t kP0 = 0, kP1 = 1, kD0 = 2, kD1 = 3;
const std::vector<uint32_t> kAll = {kP0, kP1, kD0, kD1};

// Every engine probes the other role every 500 ms from t = 0; `down` engines answer nothing and
// reach nothing from `down_from` on. Reports arrive every 200 ms (the fetch loop), each with the
// age of the reporter's latest answered probe. Runs until `until`, then returns the cut-off set.
class Network {
 public:
  explicit Network(DataReach& reach) : reach_(reach) {}

  void Down(uint32_t engine, Nanos from, Nanos to = INT64_MAX) {
    down_.push_back({engine, from, to});
  }

  void Run(Nanos from, Nanos until) {
    for (Nanos t = from; t <= until; t += 200 * kMs) {
      for (uint32_t a : kAll) {
        for (uint32_t b : kAll) {
          if ((a < 2) == (b < 2)) continue;  // same role: not probed
          // The latest probe instant (every 500 ms) at or before t that was answered.
          Nanos ok = -1;
          for (Nanos p = t / (500 * kMs) * (500 * kMs); p >= 0; p -= 500 * kMs) {
            if (!IsDown(a, p) && !IsDown(b, p)) {
              ok = p;
              break;
            }
          }
          reach_.Record(a, b, ok < 0 ? -1 : t - ok, t, t);
        }
      }
    }
  }

 private:
  struct Outage {
    uint32_t engine;
    Nanos from, to;
  };
  bool IsDown(uint32_t e, Nanos t) const {
    for (const Outage& o : down_) {
      if (o.engine == e && t >= o.from && t < o.to) return true;
    }
    return false;
  }
  DataReach& reach_;
  std::vector<Outage> down_;
};

TEST(DataReachTest, AnEngineNobodyReachesIsCutOffAfterTheWindowAndNotBefore) {
  DataReach reach(kWindow);
  Network net(reach);
  net.Down(kP1, 10 * kS);
  net.Run(0, 10 * kS);
  EXPECT_TRUE(reach.CutOff(kAll, 10 * kS).empty());
  // The last answered probe of p1 was at 9.5 s: still connected at 12.5 s, cut off after.
  net.Run(10 * kS + 200 * kMs, 12400 * kMs);
  EXPECT_TRUE(reach.CutOff(kAll, 12400 * kMs).empty());
  net.Run(12600 * kMs, 12600 * kMs);
  EXPECT_EQ(reach.CutOff(kAll, 12600 * kMs), std::vector<uint32_t>{kP1});
  // The engines it could not reach are not blamed: p0 still reaches them.
  EXPECT_EQ(reach.LastContact(kP1, kAll), 9500 * kMs);
  EXPECT_EQ(reach.LastContact(kD0, kAll), 12500 * kMs);
}

TEST(DataReachTest, OneAnsweredProbeEitherWayEndsTheCutOffRule) {
  DataReach reach(kWindow);
  Network net(reach);
  net.Down(kP1, 10 * kS, 20 * kS);
  net.Run(0, 19800 * kMs);
  EXPECT_EQ(reach.CutOff(kAll, 19800 * kMs), std::vector<uint32_t>{kP1});
  // p1 itself says nothing; d0's probe at 20.0 s is answered: the pair is in contact again.
  reach.Record(kD0, kP1, 0, 20 * kS, 20 * kS);
  EXPECT_TRUE(reach.CutOff(kAll, 20 * kS).empty());
}

// Issue 25 item 9: the partition's end. The rule stops cutting p1 off on the first answered probe
// either way, but p1 is taken back (BackSince) only once every pair with it was answered both ways
// after the cut: until then p1, or a DE, still has the other let go of and would fail new work
// with it at once (before, an attempt was lost that way after the link came back).
TEST(DataReachTest, ACutOffEngineIsTakenBackOnlyOnceEveryPairAnsweredBothWays) {
  DataReach reach(kWindow);
  Network net(reach);
  net.Down(kP1, 10 * kS, 20 * kS);
  net.Run(0, 19800 * kMs);
  ASSERT_EQ(reach.CutOff(kAll, 13 * kS), std::vector<uint32_t>{kP1});
  const Nanos cut_at = 13 * kS;
  const std::vector<uint32_t> others = {kP0, kD0, kD1};
  EXPECT_FALSE(reach.BackSince(kP1, others, cut_at));
  // d1's probe of p1 is answered at 20.0 s: no longer cut off, not yet back.
  reach.Record(kD1, kP1, 0, 20 * kS, 20 * kS);
  EXPECT_TRUE(reach.CutOff(kAll, 20 * kS).empty());
  EXPECT_FALSE(reach.BackSince(kP1, others, cut_at));
  // p1's own probes of d0 and d1, and d0's of p1: every pair both ways.
  reach.Record(kP1, kD1, 0, 20100 * kMs, 20100 * kMs);
  reach.Record(kP1, kD0, 0, 20100 * kMs, 20100 * kMs);
  EXPECT_FALSE(reach.BackSince(kP1, others, cut_at)) << "d0 has not reached p1 yet";
  reach.Record(kD0, kP1, 0, 20200 * kMs, 20200 * kMs);
  EXPECT_TRUE(reach.BackSince(kP1, others, cut_at));
  // Answers from before the cut do not count; engines not paired with p1 (p0) are not asked.
  EXPECT_FALSE(reach.BackSince(kP1, others, 20150 * kMs));
  // A forgotten engine (re-registered) takes its answers with it.
  reach.Forget(kD0);
  EXPECT_TRUE(reach.BackSince(kP1, others, cut_at)) << "d0 is no longer paired with p1";
}

TEST(DataReachTest, WhenNoPairIsConnectedNobodyIsCutOff) {
  // 1P1D with d0's link down: neither side can be blamed, and cutting both off would stop all
  // work without moving any.
  DataReach reach(kWindow);
  const std::vector<uint32_t> live = {kP0, kD0};
  for (Nanos t = 0; t <= 10 * kS; t += 200 * kMs) {
    reach.Record(kP0, kD0, t < 2 * kS ? 0 : t - 2 * kS, t, t);
    reach.Record(kD0, kP0, t < 2 * kS ? 0 : t - 2 * kS, t, t);
  }
  EXPECT_TRUE(reach.CutOff(live, 10 * kS).empty());
  // A dead third engine's old contact does not count as the network working elsewhere.
  reach.Record(kP1, kD1, 0, 10 * kS, 0);
  EXPECT_TRUE(reach.CutOff(live, 10 * kS).empty());
}

TEST(DataReachTest, ANewPairHasAGracePeriodAndAForgottenEngineStartsAgain) {
  DataReach reach(kWindow);
  Network net(reach);
  net.Run(0, 20 * kS);
  // d1 registered again at 20 s (a restarted process): its pairs start over. Its first reports
  // say nothing was answered yet; for the window that is no reason to cut it off.
  reach.Forget(kD1);
  auto report = [&](Nanos t) {
    reach.Record(kD1, kP0, -1, t - 20 * kS, t);
    reach.Record(kD1, kP1, -1, t - 20 * kS, t);
    reach.Record(kP0, kD0, 0, t, t);  // the rest of the network answers
    reach.Record(kP1, kD0, 0, t, t);
  };
  for (Nanos t = 20 * kS; t <= 23 * kS; t += 200 * kMs) report(t);
  EXPECT_TRUE(reach.CutOff(kAll, 23 * kS).empty());
  report(23200 * kMs);
  EXPECT_EQ(reach.CutOff(kAll, 23200 * kMs), std::vector<uint32_t>{kD1});
  EXPECT_FALSE(reach.LastContact(kD1, kAll).has_value());
}

TEST(DataReachTest, AnEngineThatDoesNotProbeIsJudgedByItsFetchesOnly) {
  DataReach reach(kWindow);
  // p0 and d0 probe each other; p1 neither probes nor is probed (an engine without a prober).
  for (Nanos t = 0; t <= 10 * kS; t += 200 * kMs) {
    reach.Record(kP0, kD0, 100 * kMs, t, t);
  }
  EXPECT_TRUE(reach.CutOff({kP0, kP1, kD0}, 10 * kS).empty());
}

TEST(DataReachTest, AnOlderReportNeverMovesContactBack) {
  DataReach reach(kWindow);
  reach.Record(kP0, kD0, 0, 0, 5 * kS);            // answered at 5 s
  reach.Record(kD0, kP0, 4 * kS, 6 * kS, 6 * kS);  // d0's own latest answer: 2 s
  EXPECT_EQ(reach.LastContact(kP0, {kP0, kD0}), 5 * kS);
  // Probes refused by the reporter's own id and by nobody else change nothing.
  reach.Record(kP0, kP0, 0, 0, 7 * kS);
  EXPECT_EQ(reach.LastContact(kP0, {kP0, kD0}), 5 * kS);
}

}  // namespace
}  // namespace dualpath::control
