// The backing store of a pool region: a regular file (tmpfs under /dev/shm, or hugetlbfs) or a
// DAX character device, mapped MAP_SHARED. Knows nothing about the format inside.
//
// Ownership: a Mapping owns its fd and mapping (closed/unmapped in the destructor).
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dualpath/common/status.h"

namespace dualpath::pool::internal {

class Mapping {
 public:
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Creates a regular file of `bytes` (rounded up to the huge page size on hugetlbfs; kAlready
  // Exists if present), or opens an existing DAX device (its size must be >= bytes). Where the
  // file system supports O_TMPFILE (tmpfs does) the file is created unnamed: it appears at `path`
  // only when Link() is called, after formatting, and a crash before that leaves nothing behind.
  // The file's blocks are reserved (posix_fallocate) before it is mapped, so a file system that
  // cannot hold `bytes` is kStorageNoSpace here, never a SIGBUS at a later store; nothing is left
  // at `path` then.
  static Result<std::unique_ptr<Mapping>> Create(const std::string& path, uint64_t bytes);
  // Gives a file made by Create its name (no-op if it already has one). kAlreadyExists, without
  // touching the existing file, if something appeared at the path meanwhile.
  Status Link();
  // Opens an existing region file or device read-write without modifying it.
  static Result<std::unique_ptr<Mapping>> Open(const std::string& path);
  // Backs every byte of an opened regular file with real blocks if it is sparse (a region made
  // before Create reserved its space, or extended by someone else), so that no store to the
  // mapping can SIGBUS; kStorageNoSpace if the file system cannot. Contents are unchanged. Call
  // it only once the file is known to be a region (it allocates space for the whole file).
  Status Reserve();
  // Size of the file or device at `path` (no mapping).
  static Result<uint64_t> SizeOf(const std::string& path);

  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  bool is_device() const { return is_device_; }
  const std::string& path() const { return path_; }

 private:
  Mapping() = default;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  bool is_device_ = false;
  bool unnamed_ = false;  // an O_TMPFILE file not yet linked to path_
  std::string path_;
};

}  // namespace dualpath::pool::internal
