#include "sched/read_side.h"

#include <gtest/gtest.h>

namespace dualpath::sched {
namespace {

SchedConfig WithSide(ReadSidePolicy p) {
  SchedConfig c;
  c.read_side = p;
  c.short_read_queue_tokens = 1000;
  c.block_tokens = 64;
  return c;
}

TEST(ReadSideTest, PrefillOnlyAlwaysReadsOnPe) {
  const SchedConfig c = WithSide(ReadSidePolicy::kPrefillOnly);
  uint64_t rr = 0;
  ReadChoice r = ChooseReadSide(c, 500, /*pe=*/1'000'000, /*de=*/0, &rr);
  EXPECT_EQ(r.side, ReadSide::kPrefill);
  EXPECT_EQ(r.prefill_tokens, 500);
  EXPECT_EQ(r.decode_tokens, 0);
}

TEST(ReadSideTest, RoundRobinAlternatesOverRequestsWithHits) {
  const SchedConfig c = WithSide(ReadSidePolicy::kRoundRobin);
  uint64_t rr = 0;
  EXPECT_EQ(ChooseReadSide(c, 10, 0, 99, &rr).side, ReadSide::kPrefill);
  EXPECT_EQ(ChooseReadSide(c, 10, 0, 99, &rr).side, ReadSide::kDecode);
  // A request without hits reads nothing and does not take a turn.
  ReadChoice none = ChooseReadSide(c, 0, 0, 99, &rr);
  EXPECT_EQ(none.prefill_tokens + none.decode_tokens, 0);
  EXPECT_EQ(ChooseReadSide(c, 10, 0, 99, &rr).side, ReadSide::kPrefill);
  ReadChoice d = ChooseReadSide(c, 10, 0, 99, &rr);
  EXPECT_EQ(d.side, ReadSide::kDecode);
  EXPECT_EQ(d.decode_tokens, 10);
  EXPECT_EQ(rr, 4u);
}

TEST(ReadSideTest, ShorterQueueWinsAndTiesGoToDecode) {
  const SchedConfig c = WithSide(ReadSidePolicy::kShorterQueue);
  uint64_t rr = 0;
  ReadChoice de = ChooseReadSide(c, 300, /*pe=*/501, /*de=*/500, &rr);
  EXPECT_EQ(de.side, ReadSide::kDecode);
  EXPECT_EQ(de.decode_tokens, 300);
  EXPECT_EQ(de.prefill_tokens, 0);
  EXPECT_EQ(ChooseReadSide(c, 300, 500, 500, &rr).side, ReadSide::kDecode);  // tie
  EXPECT_EQ(ChooseReadSide(c, 300, 499, 500, &rr).side, ReadSide::kPrefill);
  EXPECT_EQ(rr, 0u);  // only round-robin advances the counter
}

TEST(ReadSideTest, NoHitsReadsNothing) {
  for (auto p :
       {ReadSidePolicy::kPrefillOnly, ReadSidePolicy::kRoundRobin, ReadSidePolicy::kShorterQueue}) {
    uint64_t rr = 0;
    ReadChoice r = ChooseReadSide(WithSide(p), 0, 5, 0, &rr);
    EXPECT_EQ(r.side, ReadSide::kPrefill);
    EXPECT_EQ(r.prefill_tokens, 0);
    EXPECT_EQ(r.decode_tokens, 0);
  }
}

SchedConfig Split() {
  SchedConfig c = WithSide(ReadSidePolicy::kShorterQueue);
  c.split_reads = true;
  return c;
}

TEST(ReadSideTest, SplitEqualizesBothLongQueuesOnBlockBoundaries) {
  uint64_t rr = 0;
  // pe 5000, de 4000, hit 3000: x = (4000 - 5000 + 3000) / 2 = 1000 -> rounded to 1024.
  ReadChoice r = ChooseReadSide(Split(), 3000, 5000, 4000, &rr);
  EXPECT_EQ(r.side, ReadSide::kSplit);
  EXPECT_EQ(r.prefill_tokens, 1024);
  EXPECT_EQ(r.decode_tokens, 3000 - 1024);
  EXPECT_EQ(r.prefill_tokens % 64, 0);
  // Queues end within one block of each other.
  EXPECT_LE(std::abs((5000 + r.prefill_tokens) - (4000 + r.decode_tokens)), 2 * 64);
}

TEST(ReadSideTest, SplitOnlyWhenBothQueuesAreLong) {
  uint64_t rr = 0;
  // DE queue exactly at the threshold is "short" (<= α): plain shorter-queue choice.
  ReadChoice r = ChooseReadSide(Split(), 3000, 5000, 1000, &rr);
  EXPECT_EQ(r.side, ReadSide::kDecode);
  EXPECT_EQ(r.decode_tokens, 3000);
  // Both just above: split.
  EXPECT_EQ(ChooseReadSide(Split(), 3000, 1001, 1001, &rr).side, ReadSide::kSplit);
  // Split disabled: no split even when both are long.
  EXPECT_EQ(ChooseReadSide(WithSide(ReadSidePolicy::kShorterQueue), 3000, 1001, 1001, &rr).side,
            ReadSide::kDecode);
}

TEST(ReadSideTest, SplitDegeneratesToOneSideWhenQueuesAreFarApart) {
  uint64_t rr = 0;
  // The DE queue exceeds the PE queue by more than the hit: everything on the PE.
  ReadChoice pe = ChooseReadSide(Split(), 640, 2000, 9000, &rr);
  EXPECT_EQ(pe.side, ReadSide::kPrefill);
  EXPECT_EQ(pe.prefill_tokens, 640);
  // And the other way round.
  ReadChoice de = ChooseReadSide(Split(), 640, 9000, 2000, &rr);
  EXPECT_EQ(de.side, ReadSide::kDecode);
  EXPECT_EQ(de.decode_tokens, 640);
  // A hit smaller than half a block rounds to one side.
  ReadChoice tiny = ChooseReadSide(Split(), 20, 2000, 2000, &rr);
  EXPECT_NE(tiny.side, ReadSide::kSplit);
  EXPECT_EQ(tiny.prefill_tokens + tiny.decode_tokens, 20);
}

}  // namespace
}  // namespace dualpath::sched
