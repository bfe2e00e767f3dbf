#include "dualpath/kv/block_hash.h"

#include "kv/sha256.h"

namespace dualpath::kv {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string BlockHash::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xF];
  }
  return out;
}

Result<BlockHash> BlockHash::FromHex(std::string_view hex) {
  BlockHash h;
  if (hex.size() != h.bytes.size() * 2) {
    return InvalidArgument("block hash: expected 64 hex characters, got " +
                           std::to_string(hex.size()));
  }
  for (size_t i = 0; i < h.bytes.size(); ++i) {
    const int hi = HexValue(hex[2 * i]);
    const int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgument("block hash: non-hex character at position " +
                             std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    }
    h.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return h;
}

std::ostream& operator<<(std::ostream& os, const BlockHash& h) { return os << h.Hex(); }

BlockHash Sha256Of(const void* data, size_t n) {
  BlockHash h;
  sha256::Digest(data, n, h.bytes.data());
  return h;
}

}  // namespace dualpath::kv
