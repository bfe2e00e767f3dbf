#include "dualpath/replay/fault.h"

#include <gtest/gtest.h>

namespace dualpath::replay {
namespace {

TEST(FaultTest, ParsesEveryKindWithItsDefaults) {
  Result<FaultSpec> f = ParseFault("stor-link:p0@4req:5");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kStorageLink);
  EXPECT_EQ(f->node, "p0");
  EXPECT_EQ(f->after_results, 4u);
  EXPECT_LT(f->after_s, 0);
  EXPECT_EQ(f->duration_s, 5);
  EXPECT_EQ(f->ToString(), "stor-link:p0@4req:5");

  f = ParseFault("comp-link:d1@2.5s");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kComputeLink);
  EXPECT_EQ(f->after_s, 2.5);
  EXPECT_EQ(f->duration_s, 5);  // links: 5 s unless given

  f = ParseFault("brick@3req");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kBrick);
  EXPECT_TRUE(f->node.empty());
  EXPECT_EQ(f->duration_s, 0);  // killed and restarted at once

  f = ParseFault("service@0req:1.5");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kService);
  EXPECT_EQ(f->after_results, 0u);
  EXPECT_EQ(f->duration_s, 1.5);
  // The canonical form parses back to the same spec.
  Result<FaultSpec> again = ParseFault(f->ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToString(), f->ToString());

  f = ParseFault("store-node:p1@6req");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kStoreNode);
  EXPECT_EQ(f->node, "p1");
  EXPECT_EQ(f->duration_s, 0);  // restarted at once (empty tier)
  EXPECT_TRUE(FaultNeedsStore(f->kind));
  EXPECT_EQ(f->ToString(), "store-node:p1@6req:0");

  f = ParseFault("store-leader@4req:3");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kStoreLeader);
  EXPECT_TRUE(f->node.empty());
  EXPECT_EQ(f->duration_s, 3);
  EXPECT_TRUE(FaultNeedsStore(f->kind));
  EXPECT_FALSE(FaultNeedsStore(FaultKind::kService));

  f = ParseFault("rack-manager@2req");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kRackManager);
  EXPECT_TRUE(f->node.empty());
  EXPECT_EQ(f->duration_s, 0);  // not undone: a standby takes the role
  EXPECT_FALSE(FaultNeedsStore(f->kind));
  EXPECT_EQ(f->ToString(), "rack-manager@2req:0");
  EXPECT_EQ(ParseFault(f->ToString())->ToString(), f->ToString());

  f = ParseFault("engine:d1@2req");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, FaultKind::kEngine);
  EXPECT_EQ(f->node, "d1");
  EXPECT_EQ(f->duration_s, 0);  // not undone: its requests are rescheduled
  EXPECT_FALSE(FaultNeedsStore(f->kind));
  EXPECT_EQ(f->ToString(), "engine:d1@2req:0");
  EXPECT_EQ(ParseFault(f->ToString())->ToString(), f->ToString());
}

TEST(FaultTest, BadSpecsNameTheFlagAndWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"stor-link:p0", "no '@'"},
      {"stor-link@3req", "needs a node"},
      {"brick:p0@3req", "takes no node"},
      {"store-node@3req", "store-node needs a node"},
      {"store-leader:p0@3req", "store-leader takes no node"},
      {"rack-manager:p0@3req", "rack-manager takes no node"},
      {"rack-manager@3req:2", "rack-manager is not undone (a standby takes the role): no duration"},
      {"engine@3req", "engine needs a node"},
      {"engine:d1@3req:5", "engine is not undone (its requests are rescheduled): no duration"},
      {"disk@3req", "unknown kind 'disk'"},
      {"brick@3", "neither Nreq nor Ns"},
      {"brick@xreq", "bad request count"},
      {"brick@-1s", "outside [0, 3600]"},
      {"brick@3req:abc", "bad duration"},
      {"brick@3req:7200", "outside [0, 3600]"},
      {"service@99999999999req", "outside [0, 10000000]"},
  };
  for (const auto& [spec, want] : cases) {
    Result<FaultSpec> f = ParseFault(spec);
    ASSERT_FALSE(f.ok()) << spec;
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument) << spec;
    EXPECT_NE(f.status().message().find("--fault"), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find(want), std::string::npos) << f.status().message();
  }
}

TEST(FaultTest, RecoveryIsFromTheFaultsEndToTheNextResult) {
  ReplayResult r;
  for (Nanos t : {1, 2, 5, 9, 7}) {  // seconds; completion order need not be sorted
    RequestRecord rec;
    rec.result_ns = t * kNanosPerSecond;
    r.records.push_back(rec);
  }
  FaultOutcome o;
  o.injected = true;
  o.start_ns = 3 * kNanosPerSecond;
  o.end_ns = 6 * kNanosPerSecond;
  MeasureRecovery(r, o);
  EXPECT_EQ(o.results_before, 2u);
  EXPECT_EQ(o.results_during, 1u);
  ASSERT_TRUE(o.recovery_s.has_value());
  EXPECT_DOUBLE_EQ(*o.recovery_s, 1.0);  // the result at 7 s, not the later one at 9 s

  // The engine's done stamp wins over the replayer's receipt (its thread may have been busy
  // with the fault's commands).
  r.records[3].result.mutable_timing()->set_done_ns(6'500'000'000);
  MeasureRecovery(r, o);
  EXPECT_DOUBLE_EQ(*o.recovery_s, 0.5);

  o.end_ns = 10 * kNanosPerSecond;  // nothing completed after the fault
  MeasureRecovery(r, o);
  EXPECT_FALSE(o.recovery_s.has_value());
}

// A partition (docs/faults.md "Partitions"): what completed after the service cut the node off
// and before its link came back, and how often the scheduler re-submitted.
TEST(FaultTest, CompletionsAfterTheCutOffAndReSubmissionsAreCounted) {
  ReplayResult r;
  const std::pair<Nanos, uint32_t> done_attempt[] = {{1, 0}, {4, 0}, {6, 1}, {8, 2}, {12, 0}};
  for (const auto& [t, attempt] : done_attempt) {
    RequestRecord rec;
    rec.result_ns = t * kNanosPerSecond;
    rec.result.set_attempt(attempt);
    r.records.push_back(rec);
  }
  FaultOutcome o;
  o.injected = true;
  o.start_ns = 2 * kNanosPerSecond;
  o.end_ns = 10 * kNanosPerSecond;
  o.cut_off_ns = 5 * kNanosPerSecond;
  MeasureRecovery(r, o);
  EXPECT_EQ(o.results_during, 3u);         // at 4, 6 and 8 s
  EXPECT_EQ(o.results_after_cut_off, 2u);  // at 6 and 8 s
  EXPECT_EQ(o.scheduler_resubmissions, 3u);
  EXPECT_EQ(o.requests_resubmitted, 2u);
  ASSERT_TRUE(o.recovery_s.has_value());
  EXPECT_DOUBLE_EQ(*o.recovery_s, 2.0);
  // Never cut off (the old service, or a fault the service did not see): none counted.
  o.cut_off_ns = 0;
  MeasureRecovery(r, o);
  EXPECT_EQ(o.results_after_cut_off, 0u);
}

}  // namespace
}  // namespace dualpath::replay
