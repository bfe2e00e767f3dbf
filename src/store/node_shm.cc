#include "store/node_shm.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace dualpath::store {

ShmTier::ShmTier(std::string path, int fd, uint8_t* data, uint64_t size)
    : path_(std::move(path)), fd_(fd), data_(data), size_(size) {
  struct stat st {};
  if (::fstat(fd_, &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
}

ShmTier::~ShmTier() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

namespace {

Result<uint8_t*> MapShared(int fd, uint64_t bytes, const std::string& path) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(fmt::format("mmap {} ({} bytes)", path, bytes), errno);
  return static_cast<uint8_t*>(p);
}

}  // namespace

Result<std::unique_ptr<ShmTier>> ShmTier::Create(const std::string& path, uint64_t bytes) {
  if (bytes == 0) return InvalidArgument(fmt::format("store tier file {}: size 0", path));
  // A file left at the path: a dead node's (replace it) or a live node's (refuse).
  int old = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (old >= 0) {
    struct stat st {};
    if (::fstat(old, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(old);
      return FailedPrecondition(
          fmt::format("store tier file {} exists and is not a regular file", path));
    }
    if (::flock(old, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(old);
      if (e == EWOULDBLOCK) {
        return AlreadyExists(fmt::format(
            "store tier file {} is held by a live store node (same cluster and id)", path));
      }
      return ErrnoStatus(fmt::format("flock {}", path), e);
    }
    // Stale: no node holds it. Unlink while holding its lock, so no second starter takes it too.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int e = errno;
      ::close(old);
      return ErrnoStatus(fmt::format("remove stale store tier file {}", path), e);
    }
    ::close(old);
  } else if (errno == ELOOP) {
    return FailedPrecondition(fmt::format("store tier file {} is a symbolic link", path));
  } else if (errno != ENOENT) {
    return ErrnoStatus(fmt::format("open {}", path), errno);
  }

  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus(fmt::format("create store tier file {}", path), errno);
  auto fail = [&](Status s) {
    ::unlink(path.c_str());
    ::close(fd);
    return s;
  };
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return fail(ErrnoStatus(fmt::format("flock {}", path), errno));
  }
  if (int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    return fail(
        ErrnoStatus(fmt::format("reserve {} bytes for store tier file {}", bytes, path), e));
  }
  Result<uint8_t*> data = MapShared(fd, bytes, path);
  if (!data.ok()) return fail(data.status());
  return std::unique_ptr<ShmTier>(new ShmTier(path, fd, *data, bytes));
}

Result<std::unique_ptr<ShmTier>> ShmTier::Open(const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus(fmt::format("open store tier file {}", path), errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return FailedPrecondition(fmt::format("store tier file {} is not a regular file", path));
  }
  if (bytes == 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    ::close(fd);
    return FailedPrecondition(fmt::format("store tier file {} has {} bytes, the node advertises {}",
                                          path, st.st_size, bytes));
  }
  Result<uint8_t*> data = MapShared(fd, bytes, path);
  if (!data.ok()) {
    ::close(fd);
    return data.status();
  }
  return std::unique_ptr<ShmTier>(new ShmTier(path, fd, *data, bytes));
}

bool ShmTier::StillAtPath() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;
  return st.st_dev == dev_ && st.st_ino == ino_;
}

Status ShmTier::RemoveFile() {
  if (!StillAtPath()) return Status::Ok();
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(fmt::format("remove store tier file {}", path_), errno);
  }
  return Status::Ok();
}

}  // namespace dualpath::store
