// Helpers shared by the pool's unit and system tests (not part of the library).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "dualpath/common/splitmix.h"
#include "dualpath/pool/pool.h"

namespace dualpath::pool::testing {

// A well-mixed hash for key number i (like a real digest: all 32 bytes vary).
inline BlockHash MakeHash(uint64_t i) {
  BlockHash h;
  SplitMix64 stream(i * 7919 + 1);
  for (int w = 0; w < 4; ++w) {
    const uint64_t v = stream.Next();
    std::memcpy(h.bytes.data() + 8 * w, &v, 8);
  }
  return h;
}

// Deterministic payload for (key, size): the reader can recompute it.
inline void FillPayload(uint64_t key, std::span<std::byte> out) {
  SplitMix64 stream(key ^ 0xA5A5A5A5ull);
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const uint64_t v = stream.Next();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<std::byte>(stream.Next());
}

// FNV-1a 64 over the payload: the checksum the writer stores as the block's user tag.
inline uint64_t Checksum(std::span<const std::byte> data) {
  uint64_t h = 0xcbf29ce484222325ull;
  const size_t words = data.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t v;
    std::memcpy(&v, data.data() + 8 * i, 8);
    h = (h ^ v) * 0x100000001b3ull;
  }
  for (size_t i = words * 8; i < data.size(); ++i) {
    h = (h ^ static_cast<uint8_t>(data[i])) * 0x100000001b3ull;
  }
  return h;
}

// A directory under /dev/shm removed (with everything in it) on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/dev/shm/dptest-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace dualpath::pool::testing
