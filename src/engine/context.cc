#include "engine/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <type_traits>

#include "dualpath/common/check.h"

namespace dualpath::engine {

int64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::string_view KvSubstrateName(KvSubstrate s) {
  return s == KvSubstrate::kRackPool ? "rack-pool" : "ucx";
}

Result<KvSubstrate> ParseKvSubstrate(std::string_view name) {
  if (name == "ucx") return KvSubstrate::kUcx;
  if (name == "rack-pool") return KvSubstrate::kRackPool;
  return InvalidArgument(fmt::format("KV substrate '{}' is not ucx or rack-pool", name));
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

Result<std::vector<kv::BlockHash>> CarriedPromptHashes(const control::v1::Assignment& a,
                                                       const kv::BlockHasher& hasher) {
  static_assert(sizeof(kv::BlockHash) == 32 && std::is_trivially_copyable_v<kv::BlockHash>);
  const control::v1::RequestSpec& r = a.request();
  const std::string& bytes = a.prompt_block_hashes();
  const uint64_t bt = hasher.block_size();
  const uint64_t blocks = static_cast<uint64_t>(r.prompt_size()) / bt;
  if (bytes.size() != blocks * sizeof(kv::BlockHash)) {
    return InvalidArgument(fmt::format(
        "request {}: prompt_block_hashes has {} bytes; a prompt of {} tokens in blocks of {} "
        "needs {} hashes of 32 bytes ({} bytes)",
        r.request_id(), bytes.size(), r.prompt_size(), bt, blocks, blocks * sizeof(kv::BlockHash)));
  }
  std::vector<kv::BlockHash> hashes(blocks);
  if (blocks == 0) return hashes;
  std::memcpy(hashes.data(), bytes.data(), bytes.size());
  // One hash, not the chain: a hashing configuration that differs from the service's changes
  // every block's hash, the first included.
  const kv::BlockHash first = hasher.HashBlock(hasher.none_hash(), {r.prompt().data(), bt});
  if (first != hashes[0]) {
    return InvalidArgument(fmt::format(
        "request {}: the scheduler's hash of prompt block 0 ({}) differs from this engine's ({}, "
        "{} seed \"{}\" block {}): service and engine hash prompts differently",
        r.request_id(), hashes[0].Hex(), first.Hex(), kv::HashAlgoName(hasher.algo()),
        hasher.seed(), bt));
  }
  return hashes;
}

std::span<const kv::BlockHash> HashRange(const std::vector<kv::BlockHash>& prompt_hashes,
                                         uint64_t first_block, uint64_t n) {
  DUALPATH_CHECK(first_block + n <= prompt_hashes.size(),
                 "read plan beyond the prompt's full blocks");
  return std::span<const kv::BlockHash>(prompt_hashes).subspan(first_block, n);
}

control::v1::RequestResult FailedResult(const control::v1::Assignment& a, const Status& why) {
  control::v1::RequestResult r;
  r.set_request_id(a.request().request_id());
  r.set_ok(false);
  r.set_error(why.ToString());
  r.set_error_code(static_cast<int32_t>(why.code()));
  r.set_side(a.side());
  r.set_prefill_engine(a.prefill_engine());
  r.set_decode_engine(a.decode_engine());
  r.set_hit_tokens(a.hit_tokens());
  r.set_attempt(a.attempt());
  return r;
}

}  // namespace dualpath::engine
