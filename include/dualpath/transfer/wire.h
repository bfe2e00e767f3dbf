// The transfer engine's control messages: what two engines exchange to set up one-sided access.
//
// A HELLO carries the sender's engine id, one UCP worker address per traffic class and the
// regions it exposes (address range plus one packed UCX remote key per class, since each class
// has its own UCP context). Before the HELLOs, AUTH frames carry the challenge-response that proves
// both sides hold the cluster's transfer token (peer_auth.h), and a REFUSED frame tells a peer why
// it was turned away. A REGIONS message replaces the advertised region list after a region
// is registered or deregistered. Every frame starts with a magic and a version and ends with an
// XXH64 of everything before it, so a torn or foreign message is rejected (kCorruption) and never
// unpacked by UCX. Layout: docs/formats/transfer_control.md.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/transfer/types.h"

namespace dualpath::transfer {

inline constexpr uint32_t kWireMagic = 0x58545044;  // "DPTX" little-endian
// 2: AUTH and REFUSED before the HELLOs; 3: the HELLO carries the sender's tcp segment sizes.
inline constexpr uint16_t kWireVersion = 3;
// Sanity bounds: a UCX rkey or worker address is at most a few KiB; a peer advertising more
// regions than this is broken.
inline constexpr size_t kMaxBlobBytes = 64 * 1024;
inline constexpr size_t kMaxRegions = 1 << 20;

enum class MsgType : uint8_t { kHello = 1, kRegions = 2, kAuth = 3, kRefused = 4 };

inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthProofBytes = 32;  // HMAC-SHA256
inline constexpr size_t kMaxRefusalBytes = 512;

// A challenge (proof empty) or a response (the sender's own nonce and its proof over both).
struct Auth {
  std::string nonce;  // kAuthNonceBytes
  std::string proof;  // empty or kAuthProofBytes

  bool operator==(const Auth&) const = default;
};

struct RegionAdvert {
  RegionId id;
  uint64_t addr = 0;
  uint64_t length = 0;
  std::array<std::string, kNumClasses> rkeys;  // ucp_rkey_pack output, per class context

  bool operator==(const RegionAdvert&) const = default;
};

struct Hello {
  uint64_t engine_id = 0;                             // random per engine instance
  std::array<std::string, kNumClasses> worker_addrs;  // ucp_worker_get_address, per class
  // The segment sizes UCX's tcp transport sends and receives in the sender's process; 0 when it
  // does not use tcp. UCX aborts a process that receives a segment larger than its receive
  // segment, so each side refuses a peer whose sizes do not fit its own (docs/transfer.md).
  uint64_t tcp_tx_seg = 0;
  uint64_t tcp_rx_seg = 0;
  std::vector<RegionAdvert> regions;

  bool operator==(const Hello&) const = default;
};

std::string EncodeHello(const Hello& h);
std::string EncodeRegions(const std::vector<RegionAdvert>& regions);
std::string EncodeAuth(const Auth& a);
// `reason` is cut to kMaxRefusalBytes.
std::string EncodeRefused(std::string_view reason);

// The type of a frame after checking magic, version, length and checksum.
Result<MsgType> CheckFrame(std::string_view frame);
// kCorruption for a bad frame or a wrong type; kTransferBadRkey for an advert whose rkey is empty
// or oversized; InvalidArgument for an advert with an empty or wrapping range.
Result<Hello> DecodeHello(std::string_view frame);
Result<std::vector<RegionAdvert>> DecodeRegions(std::string_view frame);
// kCorruption for a bad frame, a wrong type, or a nonce or proof of the wrong size.
Result<Auth> DecodeAuth(std::string_view frame);
Result<std::string> DecodeRefused(std::string_view frame);

}  // namespace dualpath::transfer
