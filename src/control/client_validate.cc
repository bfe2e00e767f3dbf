// ValidateRequest (client.h): the one request check, run by the scheduler service on Submit and by
// engines on every assignment's request.
#include <fmt/format.h>

#include "dualpath/control/client.h"

namespace dualpath::control {
namespace {

Status CheckTokens(uint64_t id, const char* what,
                   const google::protobuf::RepeatedField<uint32_t>& tokens, uint32_t vocab) {
  for (int i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab) {
      return InvalidArgument(fmt::format("request {}: {} token {} at position {} >= vocab {}", id,
                                         what, tokens[i], i, vocab));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateRequest(const v1::RequestSpec& spec, uint32_t vocab, bool teacher_forced) {
  const uint64_t id = spec.request_id();
  if (spec.prompt().empty()) {
    return InvalidArgument(fmt::format("request {}: empty prompt", id));
  }
  if (spec.gen_tokens() == 0) {
    return InvalidArgument(fmt::format("request {}: gen_tokens is 0 (must be >= 1)", id));
  }
  // The decode steps feed teacher[0, gen_tokens - 1) (64-bit: the + 1 cannot overflow).
  if (teacher_forced && static_cast<uint64_t>(spec.teacher_size()) + 1 < spec.gen_tokens()) {
    return InvalidArgument(
        fmt::format("request {}: teacher has {} tokens, needs >= gen_tokens - 1 = {}", id,
                    spec.teacher_size(), spec.gen_tokens() - 1));
  }
  // The context bound that keeps every message within its limit (client.h); 64-bit sums.
  if (static_cast<uint64_t>(spec.prompt_size()) + spec.gen_tokens() > kMaxRequestTokens) {
    return InvalidArgument(
        fmt::format("request {}: {} prompt + {} generated tokens, more than kMaxRequestTokens = {}",
                    id, spec.prompt_size(), spec.gen_tokens(), kMaxRequestTokens));
  }
  if (static_cast<uint64_t>(spec.teacher_size()) > kMaxRequestTokens) {
    return InvalidArgument(
        fmt::format("request {}: teacher has {} tokens, more than kMaxRequestTokens = {}", id,
                    spec.teacher_size(), kMaxRequestTokens));
  }
  RETURN_IF_ERROR(CheckTokens(id, "prompt", spec.prompt(), vocab));
  return CheckTokens(id, "teacher", spec.teacher(), vocab);
}

}  // namespace dualpath::control
