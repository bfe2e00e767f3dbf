// ShmTier: a store node's DRAM tier file (<shm_dir>/dualpath-store-<cluster>-<id>) mapped
// MAP_SHARED, from the node's side (Create: make the file, hold it) or a same-host client's side
// (Open: map a live node's file to read and write replicas with memcpy).
//
// The node holds an exclusive flock on its file for as long as it lives, so a later start can tell
// a file left by a dead node (no lock: replaced) from one a live node holds (refused). Space is
// reserved with posix_fallocate before the mapping, so a full tmpfs is an error at start and never
// a SIGBUS on a later write.
//
// Ownership: the object owns the descriptor and the mapping (unmapped on destruction); only
// RemoveFile unlinks, and only when the path still names this object's file.
// Thread safety: the mapping's bytes may be used from any thread; the methods are const except
// RemoveFile, which the owner calls once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "dualpath/common/status.h"

namespace dualpath::store {

class ShmTier {
 public:
  // The node's side: replaces a stale file at `path` (kAlreadyExists when a live node holds it;
  // kFailedPrecondition when it is not a regular file), creates it owner-only with `bytes`
  // reserved, locks and maps it.
  static Result<std::unique_ptr<ShmTier>> Create(const std::string& path, uint64_t bytes);
  // A client's side: maps a node's existing file, which must be a regular file of at least `bytes`.
  static Result<std::unique_ptr<ShmTier>> Open(const std::string& path, uint64_t bytes);
  ~ShmTier();
  ShmTier(const ShmTier&) = delete;
  ShmTier& operator=(const ShmTier&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Whether `path` still names the mapped file (false once a new node replaced it or it is gone).
  bool StillAtPath() const;
  // Unlinks the file if `path` still names it.
  Status RemoveFile();

 private:
  ShmTier(std::string path, int fd, uint8_t* data, uint64_t size);

  std::string path_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace dualpath::store
