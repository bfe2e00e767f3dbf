// BlockStore::Scan: rebuilds the index from the directory tree at Open and removes temporary
// files that crashed writers left behind.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <string>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/storage/layout.h"
#include "storage/store_internal.h"

namespace dualpath::storage {
namespace {

// Names in `dir` (without . and ..); an absent directory is empty.
Result<std::vector<std::string>> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) {
      return names;
    }
    return ErrnoStatus("opendir " + dir, errno);
  }
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") {
      names.emplace_back(name);
    }
  }
  ::closedir(d);
  return names;
}

bool IsHexByteDir(std::string_view name) {
  return name.size() == 2 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// A writer on this host whose process no longer exists cannot finish its file.
bool LocalWriterDead(int64_t pid) {
  if (pid <= 0 || pid == ::getpid()) {
    // Our own pid on a fresh Open: the file is from an earlier process that had the same pid.
    return true;
  }
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

Status BlockStore::Scan() {
  struct Found {
    kv::BlockHash hash;
    uint64_t bytes;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  ASSIGN_OR_RETURN(std::vector<std::string> level1, ListDir(model_dir_));
  for (const std::string& a : level1) {
    if (!IsHexByteDir(a)) {
      continue;  // quarantine/, probe files
    }
    ASSIGN_OR_RETURN(std::vector<std::string> level2, ListDir(model_dir_ + "/" + a));
    for (const std::string& b : level2) {
      if (!IsHexByteDir(b)) {
        continue;
      }
      std::string dir = model_dir_ + "/" + a + "/" + b;
      ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
      for (const std::string& name : names) {
        std::string path = dir + "/" + name;
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) {
          continue;  // removed meanwhile by another process
        }
        if (auto hash = ParseBlockFileName(name)) {
          found.push_back({*hash, static_cast<uint64_t>(st.st_size),
                           int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec});
          continue;
        }
        auto tmp = ParseTmpFileName(name);
        if (!tmp) {
          continue;
        }
        // A temporary file is never visible under a block name, so removing a live one would
        // only make that writer fail; remove it when its writer is certainly gone.
        bool stale = tmp->host == host_ ? LocalWriterDead(tmp->pid)
                                        : now - st.st_mtim.tv_sec > options_.stale_tmp_seconds;
        if (stale && !options_.read_only && ::unlink(path.c_str()) == 0) {
          counters_->tmp_cleaned.fetch_add(1, std::memory_order_relaxed);
          log::Debug("storage: removed stale temporary file {}", path);
        }
      }
    }
  }
  // Oldest first, so the most recently written block ends up most recently used.
  std::sort(found.begin(), found.end(),
            [](const Found& x, const Found& y) { return x.mtime_ns < y.mtime_ns; });
  {
    std::lock_guard lock(index_->mu);
    for (const Found& f : found) {
      index_->lru.Insert(f.hash, f.bytes);
    }
  }
  if (!found.empty()) {
    EvictIfNeeded(found.back().hash);
  }
  return Status::Ok();
}

}  // namespace dualpath::storage
