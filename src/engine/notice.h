// Notice tags of the engine protocol: the 64-bit tag a transfer notice carries after a layer's
// KV has landed in the receiver's area.
//
//   bits 63..40  xfer id (24 bits): names the request's area at the receiver (chosen by the
//                receiver and sent to the other side in StartDecode / its reply)
//   bits 39..30  layer (10 bits)
//   bits 29..0   loaded tokens (30 bits): for DE -> PE pushes, how many hit tokens of the DE's
//                range the DE read and verified (the PE recomputes from there); 0 otherwise
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace dualpath::engine {

inline constexpr uint32_t kXferIdBits = 24;
inline constexpr uint32_t kMaxLayers = 1u << 10;
inline constexpr uint64_t kMaxNoticeTokens = (1ull << 30) - 1;

struct Notice {
  uint32_t xfer_id = 0;
  uint32_t layer = 0;
  uint64_t loaded_tokens = 0;
  bool operator==(const Notice&) const = default;
};

inline uint64_t EncodeNotice(const Notice& n) {
  return (uint64_t{n.xfer_id & ((1u << kXferIdBits) - 1)} << 40) |
         (uint64_t{n.layer & (kMaxLayers - 1)} << 30) | (n.loaded_tokens & kMaxNoticeTokens);
}

inline Notice DecodeNotice(uint64_t tag) {
  return Notice{static_cast<uint32_t>(tag >> 40), static_cast<uint32_t>((tag >> 30) & 0x3FF),
                tag & kMaxNoticeTokens};
}

// Next xfer id after `id` (wraps within 24 bits, skipping 0 so 0 can mean "none").
inline uint32_t NextXferId(uint32_t id) {
  uint32_t next = (id + 1) & ((1u << kXferIdBits) - 1);
  return next == 0 ? 1 : next;
}

}  // namespace dualpath::engine
