#include "sched/read_side.h"

#include <algorithm>

namespace dualpath::sched {

ReadChoice ChooseReadSide(const SchedConfig& config, int64_t hit_tokens, int64_t pe_queue,
                          int64_t de_queue, uint64_t* rr_counter) {
  ReadChoice c;
  if (hit_tokens <= 0) return c;
  switch (config.read_side) {
    case ReadSidePolicy::kPrefillOnly:
      c.side = ReadSide::kPrefill;
      break;
    case ReadSidePolicy::kRoundRobin:
      c.side = ((*rr_counter)++ % 2 == 0) ? ReadSide::kPrefill : ReadSide::kDecode;
      break;
    case ReadSidePolicy::kShorterQueue:
      // Ties go to the decode side. The paper leaves ties open; they are common while the NICs
      // are not saturated (both queues empty). Every request loads on one PE node and one DE
      // node, and with P <= D a prefill node's storage NIC already serves more requests than a
      // decode node's, so sending ties to the PE skews the load (sim: snic max/avg 1.33 vs 1.26).
      c.side = de_queue <= pe_queue ? ReadSide::kDecode : ReadSide::kPrefill;
      if (config.split_reads && pe_queue > config.short_read_queue_tokens &&
          de_queue > config.short_read_queue_tokens) {
        // Equalize: pe + x == de + (hit - x)  =>  x = (de - pe + hit) / 2, on block boundaries so
        // each side reads whole Full Blocks.
        const int64_t b = config.block_tokens;
        int64_t x = (de_queue - pe_queue + hit_tokens) / 2;
        x = std::clamp<int64_t>(x, 0, hit_tokens);
        x = (x + b / 2) / b * b;
        x = std::min(x, hit_tokens);
        if (x == 0) {
          c.side = ReadSide::kDecode;
        } else if (x == hit_tokens) {
          c.side = ReadSide::kPrefill;
        } else {
          c.side = ReadSide::kSplit;
          c.prefill_tokens = x;
          c.decode_tokens = hit_tokens - x;
          return c;
        }
      }
      break;
  }
  if (c.side == ReadSide::kPrefill) {
    c.prefill_tokens = hit_tokens;
  } else {
    c.decode_tokens = hit_tokens;
  }
  return c;
}

}  // namespace dualpath::sched
