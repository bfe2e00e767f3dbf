#include "dualpath/common/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

namespace dualpath {
namespace {

std::string Named(std::string_view what, const std::string& path) {
  std::string s(what);
  if (!s.empty()) s += ' ';
  return s + path;
}

// "a directory", "a FIFO"...: what the user pointed at instead of a file.
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

Status WriteAll(int fd, std::string_view text, const std::string& name) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write " + name, n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<UniqueFd> OpenRegularFile(const std::string& path, std::string_view what, int extra_flags) {
  const std::string name = Named(what, path);
  if (path.empty()) return InvalidArgument(std::string(what) + ": empty path");
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait for one forever. It is
  // cleared again below; for a regular file it changes nothing anyway.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | extra_flags));
  if (!fd.valid()) {
    if (errno == EINVAL && (extra_flags & O_DIRECT) != 0) {
      // Refused for O_DIRECT: say why, "not a regular file" first (a FIFO or device gets EINVAL
      // too), else the file system does not do direct I/O.
      Result<UniqueFd> plain = OpenRegularFile(path, what, extra_flags & ~O_DIRECT);
      if (!plain.ok()) return plain.status();
      return InvalidArgument("open " + name + ": O_DIRECT not supported there");
    }
    return ErrnoStatus("open " + name, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("fstat " + name, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(name + " is not a regular file (" + KindOf(st.st_mode) + ")");
  }
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) {
    return ErrnoStatus("fcntl " + name, errno);
  }
  return fd;
}

Result<std::string> ReadRegularFile(const std::string& path, std::string_view what,
                                    uint64_t max_bytes) {
  const std::string name = Named(what, path);
  ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, what));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("fstat " + name, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const std::string limit = "the limit of " + std::to_string(max_bytes) + " bytes";
  if (size > max_bytes) {
    return InvalidArgument(name + " is " + std::to_string(size) + " bytes, more than " + limit);
  }
  std::string data;
  data.resize(static_cast<size_t>(size));
  size_t done = 0;
  // Read to end of file, not to st_size: a file that grows meanwhile is read whole (up to the
  // limit), one that shrinks ends early; both stay bounded.
  while (true) {
    if (done == data.size()) {
      if (data.size() >= max_bytes) {
        char probe;
        const ssize_t n = ::read(fd.get(), &probe, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoStatus("read " + name, errno);
        if (n == 0) break;
        return InvalidArgument(name + " is larger than " + limit);
      }
      data.resize(static_cast<size_t>(
          std::min<uint64_t>(max_bytes, std::max<uint64_t>(4096, 2 * data.size()))));
    }
    const ssize_t n = ::read(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + name, errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  data.resize(done);
  return data;
}

Result<std::string> ReadInputFile(const std::string& path, std::string_view what,
                                  uint64_t max_bytes) {
  Result<std::string> text = ReadRegularFile(path, what, max_bytes);
  if (text.status().code() == Code::kNotFound) {
    return InvalidArgument(Named(what, path) + " does not exist");
  }
  return text;
}

Result<std::string> ReadSecretFile(const std::string& path, std::string_view what,
                                   uint64_t max_bytes) {
  ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, what, max_bytes));
  const std::string name = Named(what, path);
  // The mode is checked after the read succeeded (so a missing file reads as "does not exist");
  // stat follows a symlink as open did.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat " + name, errno);
  if ((st.st_mode & 077) != 0) {
    return InvalidArgument(fmt::format(
        "{} has mode {:04o}: a secret must be owner-only (chmod 600)", name, st.st_mode & 07777));
  }
  if (text.empty()) return InvalidArgument(name + " is empty");
  return text;
}

Status CheckDirectory(const std::string& path, std::string_view what) {
  const std::string name = Named(what, path);
  if (path.empty()) return InvalidArgument(std::string(what) + ": empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    // A directory the user named that is not there is bad input, like a missing input file.
    if (errno == ENOENT) return InvalidArgument(name + " does not exist");
    return ErrnoStatus("stat " + name, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument(name + " is not a directory (" + KindOf(st.st_mode) + ")");
  }
  return Status::Ok();
}

Status WriteOutputFile(const std::string& path, std::string_view text, std::string_view what) {
  const std::string name = Named(what, path);
  if (path.empty()) return InvalidArgument(std::string(what) + ": empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) return InvalidArgument(name + " is a directory");
    // A device or FIFO the user chose (/dev/stdout, a pipe): written in place, nothing to replace.
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) return ErrnoStatus("open " + name, errno);
    RETURN_IF_ERROR(WriteAll(fd.get(), text, name));
    if (::close(fd.release()) != 0) return ErrnoStatus("close " + name, errno);
    return Status::Ok();
  }
  // A new or regular file: write a temporary beside it, rename it over the target when complete.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644));
  if (!fd.valid()) return ErrnoStatus("create " + name, errno);
  Status st_write = WriteAll(fd.get(), text, name);
  if (st_write.ok() && ::close(fd.release()) != 0) {
    st_write = ErrnoStatus("close " + name, errno);
  }
  if (st_write.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st_write = ErrnoStatus("rename " + tmp + " to " + path, errno);
  }
  if (!st_write.ok()) {
    fd = UniqueFd();  // close before unlinking
    ::unlink(tmp.c_str());
  }
  return st_write;
}

Status PreparePlotDir(const std::string& dir) {
  if (dir.find_first_of("'\"\n\r\\") != std::string::npos) {
    return InvalidArgument("--plot " + dir + ": quotes, backslashes and newlines are not allowed");
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return CheckDirectory(dir, "--plot");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus("create --plot directory " + dir, ec.value());
  return CheckDirectory(dir, "--plot");
}

Status RunGnuplot(const std::string& script_path, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  std::string prog = "gnuplot";
  std::vector<char*> argv = {prog.data(), const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return ErrnoStatus(err == ENOENT ? "run gnuplot (is it installed?)" : "run gnuplot", err);
  }
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return ErrnoStatus("wait for gnuplot", errno);
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return Status::Ok();
  const std::string how = WIFEXITED(wstatus) ? "exit " + std::to_string(WEXITSTATUS(wstatus))
                                             : "signal " + std::to_string(WTERMSIG(wstatus));
  return IoError("gnuplot " + script_path + " failed (" + how + "); see " + log_path);
}

}  // namespace dualpath
