// Read-side choice for one request (DualPath §6.1 "KV-Cache Read Task Scheduling"), as a pure
// function so its rules can be tested without a cluster. Private to sched.
#pragma once

#include <cstdint>

#include "dualpath/sched/config.h"
#include "dualpath/sched/types.h"

namespace dualpath::sched {

struct ReadChoice {
  ReadSide side = ReadSide::kPrefill;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
};

// `hit_tokens` to read; `pe_queue` / `de_queue`: read queues (tokens) of the PE's and the DE's
// node before this request; `rr_counter`: the scheduler's round-robin state (advanced only by the
// round-robin policy, once per request with hits).
//  - prefill-only: always the PE.
//  - round-robin: PE, DE, PE, ... over requests with hits.
//  - shorter-queue: the PE if its queue is strictly shorter, else the DE (ties go to the DE: with
//    P <= D a prefill node's storage NIC serves more requests than a decode node's).
//  - split (shorter-queue + split_reads, both queues > short_read_queue_tokens): the PE reads x
//    tokens and the DE hit-x, x chosen so both queues end equal (pe+x = de+hit-x), rounded to
//    block_tokens; if x rounds to 0 or hit the whole read goes to one side.
// Requests without hits read nothing (kPrefill, 0, 0).
ReadChoice ChooseReadSide(const SchedConfig& config, int64_t hit_tokens, int64_t pe_queue,
                          int64_t de_queue, uint64_t* rr_counter);

}  // namespace dualpath::sched
