#include "pool/region.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace dualpath::pool::internal {
namespace {

// A DAX device's size is in sysfs (a character device has no st_size).
Result<uint64_t> DeviceSize(const std::string& path, const struct stat& st) {
  const std::string sys =
      fmt::format("/sys/dev/char/{}:{}/size", major(st.st_rdev), minor(st.st_rdev));
  std::ifstream in(sys);
  uint64_t size = 0;
  if (!(in >> size) || size == 0) {
    return InvalidArgument(
        fmt::format("{}: character device is not a DAX device ({} unreadable)", path, sys));
  }
  return size;
}

// A directory given where a region is expected is bad input (exit 2), not an I/O error.
Status IsADirectory(const std::string& path) {
  return InvalidArgument(fmt::format("{}: is a directory, not a pool region", path));
}

Result<uint64_t> SizeOfFd(int fd, const std::string& path, bool* is_device) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return ErrnoStatus(fmt::format("fstat {}", path), errno);
  }
  if (S_ISREG(st.st_mode)) {
    *is_device = false;
    return static_cast<uint64_t>(st.st_size);
  }
  if (S_ISCHR(st.st_mode)) {
    *is_device = true;
    return DeviceSize(path, st);
  }
  if (S_ISDIR(st.st_mode)) return IsADirectory(path);
  return InvalidArgument(fmt::format("{}: not a regular file or a DAX character device", path));
}

// Backs [0, bytes) of a regular file with real blocks (tmpfs: pages of its quota; hugetlbfs:
// huge pages). A sparse shared mapping is a promise the file system may not keep: a store to a
// page it cannot allocate is SIGBUS, not an error, and no process of ours may ever take that
// from a pool file. Reserving before mapping turns a full file system into kStorageNoSpace here.
Status ReserveFd(int fd, uint64_t bytes, const std::string& path) {
  // posix_fallocate returns the error number (it does not set errno); EINTR: a signal arrived
  // while a large range was being allocated, allocating again resumes.
  int rc = 0;
  do {
    rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  } while (rc == EINTR);
  if (rc == 0) return Status::Ok();
  std::string free_note;
  struct statfs fs {};
  if ((rc == ENOSPC || rc == EDQUOT) && fstatfs(fd, &fs) == 0) {
    free_note = fmt::format(" (the file system has {} bytes free)",
                            static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_bsize));
  }
  return ErrnoStatus(fmt::format("reserve {} bytes for {}{}", bytes, path, free_note), rc);
}

Result<uint8_t*> MapFd(int fd, uint64_t bytes, const std::string& path) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return ErrnoStatus(fmt::format("mmap {} bytes of {}", bytes, path), errno);
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<Mapping>> Mapping::Create(const std::string& path, uint64_t bytes) {
  std::unique_ptr<Mapping> m(new Mapping());
  m->path_ = path;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
    m->fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (m->fd_ < 0) return ErrnoStatus(fmt::format("open {}", path), errno);
    ASSIGN_OR_RETURN(uint64_t size, SizeOfFd(m->fd_, path, &m->is_device_));
    if (size < bytes) {
      return Status(Code::kPoolTooSmall,
                    fmt::format("{}: device has {} bytes, {} requested", path, size, bytes));
    }
    m->bytes_ = bytes;
  } else {
    if (lstat(path.c_str(), &st) == 0) {
      return Status(Code::kAlreadyExists, fmt::format("create {}: file exists", path));
    }
    // Unnamed first (linked in once formatted), else by name with O_EXCL (never clobbers).
    const std::string dir = std::filesystem::path(path).parent_path().string();
    m->fd_ = open(dir.empty() ? "." : dir.c_str(), O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
    m->unnamed_ = m->fd_ >= 0;
    if (m->fd_ < 0) m->fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (m->fd_ < 0) return ErrnoStatus(fmt::format("create {}", path), errno);
    struct statfs fs {};
    if (fstatfs(m->fd_, &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC) {
      // hugetlbfs files are sized in whole huge pages.
      const uint64_t page = static_cast<uint64_t>(fs.f_bsize);
      bytes = (bytes + page - 1) / page * page;
    }
    // Size and reserve in one step: the whole file is backed before it is mapped (see
    // ReserveFd). On failure the file is ours to remove: an unnamed one goes with its fd, a named
    // one was created by this call with O_EXCL.
    if (Status s = ReserveFd(m->fd_, bytes, path); !s.ok()) {
      if (!m->unnamed_) unlink(path.c_str());
      return s;
    }
    m->bytes_ = bytes;
  }
  Result<uint8_t*> base = MapFd(m->fd_, m->bytes_, path);
  if (!base.ok()) {
    if (!m->is_device_ && !m->unnamed_) unlink(path.c_str());
    return base.status();
  }
  m->base_ = *base;
  return m;
}

Status Mapping::Link() {
  if (!unnamed_) return Status::Ok();
  // linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the /proc/self/fd route does not. Like
  // link(2) it fails with EEXIST instead of replacing what is there.
  const std::string self = fmt::format("/proc/self/fd/{}", fd_);
  if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    return ErrnoStatus(fmt::format("create {}", path_), errno);
  }
  unnamed_ = false;
  return Status::Ok();
}

Status Mapping::Reserve() {
  if (is_device_) return Status::Ok();
  struct stat st {};
  if (fstat(fd_, &st) != 0) return ErrnoStatus(fmt::format("fstat {}", path_), errno);
  // Already backed (every file Create made since reservation existed): nothing to do, and no
  // walk over every page of a large region at each attach.
  if (static_cast<uint64_t>(st.st_blocks) * 512 >= bytes_) return Status::Ok();
  return ReserveFd(fd_, bytes_, path_);
}

Result<std::unique_ptr<Mapping>> Mapping::Open(const std::string& path) {
  std::unique_ptr<Mapping> m(new Mapping());
  m->path_ = path;
  m->fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (m->fd_ < 0 && errno == EISDIR) return IsADirectory(path);
  if (m->fd_ < 0) return ErrnoStatus(fmt::format("open {}", path), errno);
  ASSIGN_OR_RETURN(m->bytes_, SizeOfFd(m->fd_, path, &m->is_device_));
  if (m->bytes_ == 0) {
    return Status(Code::kPoolTooSmall, fmt::format("{}: empty file", path));
  }
  ASSIGN_OR_RETURN(m->base_, MapFd(m->fd_, m->bytes_, path));
  return m;
}

Result<uint64_t> Mapping::SizeOf(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0) return ErrnoStatus(fmt::format("open {}", path), errno);
  bool dev = false;
  Result<uint64_t> r = SizeOfFd(fd, path, &dev);
  close(fd);
  return r;
}

}  // namespace dualpath::pool::internal
