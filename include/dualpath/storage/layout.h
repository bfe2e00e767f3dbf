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
// Modes: directories the store creates are 0750 and files 0640 (kStoreDirMode, kStoreFileMode):
// the owner writes, the owner's group may read (a reader running as another user of the group,
// such as a service that only probes for hits), others get nothing. They are passed to mkdir and
// open, so the process umask can only narrow them, never widen them. A root that already exists
// keeps its own mode. Every name below the root is made here (hex of a hash or fingerprint, fixed
// words); a name that comes from outside (a per-run subdirectory) passes CheckPathComponent first,
// so no input can name a path outside the store.
//
// Thread safety: pure functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"

namespace dualpath::storage {

inline constexpr std::string_view kBlockSuffix = ".kvb";
inline constexpr std::string_view kTmpMarker = ".tmp.";
inline constexpr std::string_view kQuarantineDir = "quarantine";
inline constexpr mode_t kStoreDirMode = 0750;
inline constexpr mode_t kStoreFileMode = 0640;

// Ok when `name` is one directory entry name: kInvalidArgument "<what> '<name>' must be one
// directory name (...)" when it is empty, "." or "..", or contains '/' or a NUL byte.
Status CheckPathComponent(std::string_view name, std::string_view what);

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
