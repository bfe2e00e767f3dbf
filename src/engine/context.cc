#include "engine/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

namespace dualpath::engine {

int64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

ReadPlan MakeReadPlan(const control::v1::Assignment& a, uint32_t block_tokens) {
  ReadPlan p;
  const int64_t bt = block_tokens;
  p.prompt = a.request().prompt_size();
  // At least one prompt token is always computed (its logits give the first token).
  p.hit = std::clamp<int64_t>(a.hit_tokens(), 0, std::max<int64_t>(p.prompt - 1, 0)) / bt * bt;
  switch (a.side()) {
    case control::v1::READ_SIDE_DECODE:
      p.decode_read = p.hit;
      break;
    case control::v1::READ_SIDE_SPLIT:
      p.prefill_read = std::clamp<int64_t>(a.prefill_read_tokens(), 0, p.hit) / bt * bt;
      p.decode_read = p.hit - p.prefill_read;
      break;
    case control::v1::READ_SIDE_NONE:
      p.none = true;
      break;
    default:  // PREFILL, or an unspecified side from an older service: the PE reads
      p.prefill_read = p.hit;
      break;
  }
  return p;
}

std::vector<kv::BlockHash> HashRange(const kv::BlockHasher& hasher,
                                     std::span<const uint32_t> tokens, uint64_t first_block,
                                     uint64_t n) {
  std::vector<kv::BlockHash> all;
  const uint64_t bt = hasher.block_size();
  // The chain runs from the first token: hash every block up to the range's end.
  hasher.HashBlocks(tokens.subspan(0, std::min<uint64_t>(tokens.size(), (first_block + n) * bt)),
                    &all);
  if (all.size() < first_block + n) {
    all.resize(first_block + n);  // not reachable for valid plans; zero hashes simply miss
  }
  return std::vector<kv::BlockHash>(all.begin() + static_cast<ptrdiff_t>(first_block),
                                    all.begin() + static_cast<ptrdiff_t>(first_block + n));
}

control::v1::RequestResult FailedResult(const control::v1::Assignment& a, const Status& why) {
  control::v1::RequestResult r;
  r.set_request_id(a.request().request_id());
  r.set_ok(false);
  r.set_error(why.ToString());
  r.set_side(a.side());
  r.set_prefill_engine(a.prefill_engine());
  r.set_decode_engine(a.decode_engine());
  r.set_hit_tokens(a.hit_tokens());
  r.set_attempt(a.attempt());
  return r;
}

}  // namespace dualpath::engine
