#include "dualpath/storage/layout.h"

#include <charconv>

namespace dualpath::storage {

Status CheckPathComponent(std::string_view name, std::string_view what) {
  const char* why = nullptr;
  if (name.empty()) {
    why = "empty";
  } else if (name == "." || name == "..") {
    why = "a reference to a directory itself or its parent";
  } else if (name.find('/') != std::string_view::npos) {
    why = "contains '/'";
  } else if (name.find('\0') != std::string_view::npos) {
    why = "contains a NUL byte";
  }
  if (why == nullptr) return Status::Ok();
  std::string shown(name);
  for (char& c : shown) {
    if (c == '\0') c = '?';
  }
  return InvalidArgument(std::string(what) + " '" + shown + "' must be one directory name (" + why +
                         ")");
}

std::string BlockDir(const std::string& model_dir, const kv::BlockHash& hash) {
  std::string hex = hash.Hex();
  std::string dir = model_dir;
  dir += '/';
  dir.append(hex, 0, 2);
  dir += '/';
  dir.append(hex, 2, 2);
  return dir;
}

std::string BlockPath(const std::string& model_dir, const kv::BlockHash& hash) {
  std::string path = BlockDir(model_dir, hash);
  path += '/';
  path += hash.Hex();
  path += kBlockSuffix;
  return path;
}

std::string TmpPath(const std::string& model_dir, const kv::BlockHash& hash, std::string_view host,
                    int64_t pid, uint64_t seq) {
  std::string path = BlockDir(model_dir, hash);
  path += "/.";
  path += hash.Hex();
  path += kTmpMarker;
  path += host;
  path += '.';
  path += std::to_string(pid);
  path += '.';
  path += std::to_string(seq);
  return path;
}

std::optional<kv::BlockHash> ParseBlockFileName(std::string_view name) {
  if (name.size() != 64 + kBlockSuffix.size() || !name.ends_with(kBlockSuffix)) {
    return std::nullopt;
  }
  Result<kv::BlockHash> hash = kv::BlockHash::FromHex(name.substr(0, 64));
  if (!hash.ok()) {
    return std::nullopt;
  }
  return *hash;
}

std::optional<TmpName> ParseTmpFileName(std::string_view name) {
  // ".<64 hex>.tmp.<host>.<pid>.<seq>"; the host may itself contain dots, so parse from the end.
  if (name.size() < 1 + 64 + kTmpMarker.size() || name[0] != '.' ||
      name.substr(65, kTmpMarker.size()) != kTmpMarker) {
    return std::nullopt;
  }
  Result<kv::BlockHash> hash = kv::BlockHash::FromHex(name.substr(1, 64));
  if (!hash.ok()) {
    return std::nullopt;
  }
  std::string_view rest = name.substr(65 + kTmpMarker.size());  // <host>.<pid>.<seq>
  size_t seq_dot = rest.rfind('.');
  if (seq_dot == std::string_view::npos || seq_dot == 0) {
    return std::nullopt;
  }
  size_t pid_dot = rest.rfind('.', seq_dot - 1);
  if (pid_dot == std::string_view::npos || pid_dot == 0) {
    return std::nullopt;
  }
  std::string_view pid_text = rest.substr(pid_dot + 1, seq_dot - pid_dot - 1);
  int64_t pid = 0;
  auto [ptr, ec] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
  if (ec != std::errc() || ptr != pid_text.data() + pid_text.size()) {
    return std::nullopt;
  }
  return TmpName{*hash, std::string(rest.substr(0, pid_dot)), pid};
}

}  // namespace dualpath::storage
