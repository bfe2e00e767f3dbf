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

}  // namespace dualpath::sched
