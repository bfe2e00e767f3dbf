// Where block files live under a store root (docs/formats/storage_layout.md):
//
//   <root>/<model fingerprint hex>/<h0h1>/<h2h3>/<hash hex>.kvb        published block
//   <root>/<model fingerprint hex>/<h0h1>/<h2h3>/.<hash hex>.tmp.<host>.<pid>.<seq>
//                                                                       a write in progress
//   <root>/<model fingerprint hex>/quarantine/<hash hex>.<reason>.<host>.<pid>.<seq>
//                                                                       a file that failed checks
//
// The fingerprint directory keeps two models' blocks apart even if their block hashes collide
// (the hash covers tokens, not the model). Two levels of 256-way fan-out keep directories small
// (a million blocks is ~15 files per leaf) because lookups in huge directories are slow on most
// distributed file systems. A temporary file sits in the same directory as its final name so the
// publishing rename never crosses directories (atomic on every POSIX file system, including FUSE
// and network file systems that do not support cross-directory renames atomically).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dualpath/kv/block_hash.h"

namespace dualpath::storage {

inline constexpr std::string_view kBlockSuffix = ".kvb";
inline constexpr std::string_view kTmpMarker = ".tmp.";
inline constexpr std::string_view kQuarantineDir = "quarantine";

// <model_dir>/<h0h1>/<h2h3>
std::string BlockDir(const std::string& model_dir, const kv::BlockHash& hash);
// <model_dir>/<h0h1>/<h2h3>/<hash>.kvb
std::string BlockPath(const std::string& model_dir, const kv::BlockHash& hash);
// <block dir>/.<hash>.tmp.<host>.<pid>.<seq>
std::string TmpPath(const std::string& model_dir, const kv::BlockHash& hash, std::string_view host,
                    int64_t pid, uint64_t seq);

// "<hash>.kvb" → the hash; anything else → nullopt.
std::optional<kv::BlockHash> ParseBlockFileName(std::string_view file_name);

struct TmpName {
  kv::BlockHash hash;
  std::string host;
  int64_t pid = 0;
};
// ".<hash>.tmp.<host>.<pid>.<seq>" → its parts; anything else → nullopt.
std::optional<TmpName> ParseTmpFileName(std::string_view file_name);

}  // namespace dualpath::storage
