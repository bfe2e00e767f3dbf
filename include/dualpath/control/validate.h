// The one check of a request (scheduler.proto's RequestSpec) against what its fields promise,
// shared by everything that receives one: the scheduler service refuses a bad Submit with it, and
// engines check each assignment's request with it (a PE admitting it, a DE starting its decode),
// so bad input fails that request instead of the engine. Part of the client library
// (dualpath_control_client): a client may run it before sending.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "dualpath/common/status.h"
#include "dualpath/control/v1/scheduler.pb.h"

namespace dualpath::control {

// Ok, or kInvalidArgument naming the request and the first problem found, in this order:
//   "request 7: empty prompt"
//   "request 7: gen_tokens is 0 (must be >= 1)"
//   "request 7: teacher has 3 tokens, needs >= gen_tokens - 1 = 4"
//   "request 7: prompt token 5000 at position 3 >= vocab 4096" (then the same for teacher tokens:
//   every one, including any beyond the gen_tokens - 1 the decode steps feed)
Status ValidateRequest(const v1::RequestSpec& spec, uint32_t vocab);

}  // namespace dualpath::control
