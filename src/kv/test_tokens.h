// Test helpers shared by the kv unit tests and the kv system tests: the splitmix64 token
// generator mirrored from tests/kv/gen_vectors.py (so committed vectors need not carry token
// lists) and the vector file loader.
//
// Private to tests. Thread safety: none needed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/splitmix.h"

namespace dualpath::kv::testing {

// Mirrors gen_vectors.py tokens(prng_seed, count, mode).
inline std::vector<uint32_t> MakeTokens(uint64_t prng_seed, size_t count, std::string_view mode) {
  static constexpr uint64_t kMax = 0x7FFFFFFF;
  static constexpr uint64_t kEdge[] = {0,     1,     23,       24,       255, 256,
                                       65535, 65536, 16777215, 16777216, kMax};
  SplitMix64 rng(prng_seed);
  std::vector<uint32_t> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = 0;
    if (mode == "full") {
      v = rng.Next() % (kMax + 1);
    } else if (mode == "vocab") {
      v = rng.Next() % 151936;
    } else {
      const uint64_t cls = rng.Next() % 5;
      const uint64_t r = rng.Next();
      switch (cls) {
        case 0:
          v = r % 24;
          break;
        case 1:
          v = 24 + r % (256 - 24);
          break;
        case 2:
          v = 256 + r % (65536 - 256);
          break;
        case 3:
          v = 65536 + r % (kMax + 1 - 65536);
          break;
        default:
          v = kEdge[r % std::size(kEdge)];
          break;
      }
    }
    out.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

// Path of a file in the source tree (ctest sets DUALPATH_SOURCE_DIR).
inline std::string SourcePath(const std::string& rel) {
  const char* root = std::getenv("DUALPATH_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + rel;
}

inline nlohmann::json LoadVectors() {
  const std::string path = SourcePath("tests/kv/data/vllm_sha256_cbor_vectors.json");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + " (is DUALPATH_SOURCE_DIR set?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

}  // namespace dualpath::kv::testing
