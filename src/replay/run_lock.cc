#include "run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <utility>

namespace dualpath::replay {

Result<RunLock> RunLock::Acquire(const std::string& dir, const std::string& cluster) {
  if (cluster.empty() || cluster.find('/') != std::string::npos) {
    return InvalidArgument("cluster name '" + cluster + "' cannot name a lock file");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("create " + dir + ": " + ec.message());
  std::string path = dir + "/" + cluster + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      return ErrnoStatus("flock " + path, err);
    }
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return Unavailable("cluster '" + cluster +
                       "' is in use by another `dualpath cluster run` (pid " + holder + ", lock " +
                       path + "); wait for it to finish or use another --name");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("write " + path, err);
  }
  return RunLock(fd, std::move(path));
}

RunLock::RunLock(RunLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor of the open file drops the flock
}

}  // namespace dualpath::replay
