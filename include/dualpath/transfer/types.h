// Value types of the transfer engine: traffic classes, operations and batch descriptors.
//
// A Descriptor names `length` bytes at `local_addr` in this process and `remote_addr` in a peer's
// address space; both ranges must lie inside regions registered with a TransferEngine (the local
// one here, the remote one advertised by the peer). Addresses are plain virtual addresses, the
// way RDMA names memory, so a caller never translates between region offsets and pointers.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string_view>

#include "dualpath/common/ids.h"

namespace dualpath::transfer {

// DualPath §5: model-execution traffic (collectives, control) travels in the high class; KV-cache
// traffic in the low class, which only uses bandwidth the high class leaves idle.
enum class TrafficClass : uint8_t { kHigh = 0, kLow = 1 };
inline constexpr int kNumClasses = 2;

inline constexpr int ClassIndex(TrafficClass c) { return static_cast<int>(c); }
std::string_view ClassName(TrafficClass c);

enum class Op : uint8_t { kPut = 0, kGet = 1 };
std::string_view OpName(Op op);

// One contiguous transfer. Put copies local → remote; get copies remote → local.
struct Descriptor {
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
};

// A connected peer engine, as numbered by this engine (ids are never reused).
using PeerId = StrongId<struct PeerIdTag, uint32_t>;
// A registered region, as numbered by the engine that registered it.
using RegionId = StrongId<struct RegionIdTag, uint32_t>;

}  // namespace dualpath::transfer
