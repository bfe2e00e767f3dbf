#include "dualpath/sched/types.h"

#include <fmt/format.h>

namespace dualpath::sched {

Status SchedRequest::Validate() const {
  if (prompt_tokens <= 0) {
    return InvalidArgument(
        fmt::format("request {}: prompt_tokens must be > 0, got {}", id.value(), prompt_tokens));
  }
  if (hit_tokens < 0 || hit_tokens > prompt_tokens) {
    return InvalidArgument(fmt::format("request {}: hit_tokens {} outside [0, prompt_tokens {}]",
                                       id.value(), hit_tokens, prompt_tokens));
  }
  if (expected_gen_tokens < 0) {
    return InvalidArgument(fmt::format("request {}: expected_gen_tokens must be >= 0, got {}",
                                       id.value(), expected_gen_tokens));
  }
  return Status::Ok();
}

std::string_view ReadSideName(ReadSide side) {
  switch (side) {
    case ReadSide::kPrefill:
      return "prefill";
    case ReadSide::kDecode:
      return "decode";
    case ReadSide::kSplit:
      return "split";
  }
  return "unknown";
}

std::string_view TooLongName(TooLong t) {
  switch (t) {
    case TooLong::kFits:
      return "fits";
    case TooLong::kPrefill:
      return "prefill";
    case TooLong::kDecode:
      return "decode";
  }
  return "unknown";
}

TooLong CheckTooLong(int64_t prompt_tokens, int64_t gen_tokens, int64_t prefill_capacity_tokens,
                     int64_t decode_capacity_tokens) {
  if (prefill_capacity_tokens > 0 && prompt_tokens > prefill_capacity_tokens) {
    return TooLong::kPrefill;
  }
  // prompt + gen > capacity, written so that no sum of two large inputs can wrap.
  if (decode_capacity_tokens > 0 && (gen_tokens > decode_capacity_tokens ||
                                     prompt_tokens > decode_capacity_tokens - gen_tokens)) {
    return TooLong::kDecode;
  }
  return TooLong::kFits;
}

}  // namespace dualpath::sched
