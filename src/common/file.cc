#include "dualpath/common/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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

// Back to blocking I/O on a descriptor opened O_NONBLOCK (so that opening a FIFO could not block).
Status ClearNonBlock(int fd, const std::string& name) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
    return ErrnoStatus("fcntl " + name, errno);
  return Status::Ok();
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
  RETURN_IF_ERROR(ClearNonBlock(fd.get(), name));
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

namespace {

// The process's umask without changing it (umask(2) can only set it, and setting it twice would
// race with other threads creating files): Linux reports it in /proc/self/status since 4.7.
mode_t CurrentUmask() {
  Result<std::string> status = ReadRegularFile("/proc/self/status", "status", 1 << 16);
  if (status.ok()) {
    const size_t pos = status->find("\nUmask:");
    if (pos != std::string::npos) {
      return static_cast<mode_t>(std::strtoul(status->c_str() + pos + 8, nullptr, 8) & 0777);
    }
  }
  return 022;
}

constexpr mode_t kOutputMode = 0644;

// What lstat says is at an output path: Ok(true) when a regular file or nothing is there (write a
// new file), Ok(false) for a character device (written in place), kInvalidArgument for anything
// else; the symlink itself is looked at, not what it points to.
Result<bool> CheckOutputTarget(const std::string& path, const std::string& name) {
  if (path.empty()) return InvalidArgument(name + ": empty path");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    // A missing directory is reported when the file is created (kNotFound, exit 1), as before.
    if (errno == ENOENT) return true;
    return ErrnoStatus("stat " + name, errno);
  }
  if (S_ISREG(st.st_mode)) return true;
  if (S_ISCHR(st.st_mode)) return false;
  if (S_ISLNK(st.st_mode)) {
    return InvalidArgument(name +
                           " is a symbolic link: outputs are never written through a link; name "
                           "the file itself");
  }
  if (S_ISDIR(st.st_mode)) return InvalidArgument(name + " is a directory");
  return InvalidArgument(name + " is not a regular file (" + KindOf(st.st_mode) + ")");
}

// Opens the character device at `path` for writing; fstat() of the opened descriptor checks it is
// still one (O_NONBLOCK: a FIFO swapped in meanwhile must not block the open).
Result<UniqueFd> OpenCharDevice(const std::string& path, const std::string& name) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return ErrnoStatus("open " + name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("fstat " + name, errno);
  if (!S_ISCHR(st.st_mode)) {
    return InvalidArgument(name + " is not a regular file (" + KindOf(st.st_mode) + ")");
  }
  RETURN_IF_ERROR(ClearNonBlock(fd.get(), name));
  return fd;
}

}  // namespace

Status WriteOutputFile(const std::string& path, std::string_view text, std::string_view what) {
  const std::string name = Named(what, path);
  if (path.empty()) return InvalidArgument(std::string(what) + ": empty path");
  ASSIGN_OR_RETURN(const bool replace, CheckOutputTarget(path, name));
  if (!replace) {
    // A character device the user chose (/dev/null, /dev/full, a terminal): nothing to replace.
    ASSIGN_OR_RETURN(UniqueFd fd, OpenCharDevice(path, name));
    RETURN_IF_ERROR(WriteAll(fd.get(), text, name));
    if (::close(fd.release()) != 0) return ErrnoStatus("close " + name, errno);
    return Status::Ok();
  }
  // A new or regular file: a temporary of our own beside it, renamed over the target when
  // complete. mkostemp creates it with O_CREAT | O_EXCL (a planted name or symlink makes it pick
  // another name, never reuse or follow one); its short fixed name keeps 255-byte targets working.
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? std::string(".") : (slash == 0 ? "/" : path.substr(0, slash));
  std::string tmp = dir + "/.dualpath-out.XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("create " + name, errno);
  // mkostemp makes the file 0600; an output gets the mode a plain create would give it.
  Status st_write = Status::Ok();
  if (::fchmod(fd.get(), kOutputMode & ~CurrentUmask()) != 0) {
    st_write = ErrnoStatus("chmod " + tmp, errno);
  }
  if (st_write.ok()) st_write = WriteAll(fd.get(), text, name);
  if (st_write.ok() && ::close(fd.release()) != 0) {
    st_write = ErrnoStatus("close " + name, errno);
  }
  // rename() replaces the name: had someone swapped a symlink in at `path` since the check, the
  // link is replaced, never written through.
  if (st_write.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st_write = ErrnoStatus("rename " + tmp + " to " + path, errno);
  }
  if (!st_write.ok()) {
    fd = UniqueFd();  // close before unlinking
    ::unlink(tmp.c_str());
  }
  return st_write;
}

Result<UniqueFd> CreateOutputFile(const std::string& path, std::string_view what) {
  const std::string name = Named(what, path);
  if (path.empty()) return InvalidArgument(std::string(what) + ": empty path");
  ASSIGN_OR_RETURN(const bool regular, CheckOutputTarget(path, name));
  if (!regular) return OpenCharDevice(path, name);
  // O_NOFOLLOW: a symlink planted since the check fails the open (ELOOP) instead of being
  // followed; O_NONBLOCK: so does a FIFO, found by the fstat below without blocking.
  UniqueFd fd(::open(path.c_str(),
                     O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK,
                     kOutputMode));
  if (!fd.valid()) return ErrnoStatus("create " + name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("fstat " + name, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(name + " is not a regular file (" + KindOf(st.st_mode) + ")");
  }
  RETURN_IF_ERROR(ClearNonBlock(fd.get(), name));
  if (::ftruncate(fd.get(), 0) != 0) return ErrnoStatus("truncate " + name, errno);
  return fd;
}

Result<FileLock> FileLock::TryAcquire(const std::string& path) {
  // No O_TRUNC: the holder's pid must stay readable until the claim is ours.
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return ErrnoStatus("open lock " + path, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) return ErrnoStatus("flock " + path, err);
    char buf[32] = {};
    const ssize_t n = ::pread(fd.get(), buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return Unavailable("pid " + (holder.empty() ? std::string("unknown") : holder) + " holds " +
                       path);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), pid.data(), pid.size(), 0) < 0) {
    return ErrnoStatus("write lock " + path, errno);
  }
  return FileLock(std::move(fd), path);
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

Status RunGnuplot(const std::string& dir, const std::string& script_path) {
  const std::string log_path = dir + "/gnuplot.log";
  ASSIGN_OR_RETURN(UniqueFd log, CreateOutputFile(log_path, "--plot"));
  // gnuplot writes its outputs where it runs: a private directory of ours (see file.h).
  std::string work = dir + "/.dualpath-plot.XXXXXX";
  if (::mkdtemp(work.data()) == nullptr) return ErrnoStatus("create --plot " + work, errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, log.get(), STDERR_FILENO);
  posix_spawn_file_actions_addchdir_np(&actions, work.c_str());
  std::string prog = "gnuplot";
  // gnuplot resolves the script's path in its own working directory.
  std::error_code abs_ec;
  std::string script = std::filesystem::absolute(script_path, abs_ec).string();
  if (abs_ec) script = script_path;
  std::vector<char*> argv = {prog.data(), script.data(), nullptr};
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  Status status = Status::Ok();
  if (err != 0) {
    status = ErrnoStatus(err == ENOENT ? "run gnuplot (is it installed?)" : "run gnuplot", err);
  } else {
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0) {
      if (errno != EINTR) {
        status = ErrnoStatus("wait for gnuplot", errno);
        break;
      }
    }
    if (status.ok() && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
      const std::string how = WIFEXITED(wstatus) ? "exit " + std::to_string(WEXITSTATUS(wstatus))
                                                 : "signal " + std::to_string(WTERMSIG(wstatus));
      status = IoError("gnuplot " + script_path + " failed (" + how + "); see " + log_path);
    }
  }
  // Whatever gnuplot wrote goes to `dir` (rename replaces a name, it never follows a link there);
  // the private directory goes in any case.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(work, ec)) {
    const std::string to = dir + "/" + e.path().filename().string();
    if (status.ok() && e.is_regular_file(ec) && ::rename(e.path().c_str(), to.c_str()) != 0) {
      status = ErrnoStatus("rename " + e.path().string() + " to " + to, errno);
    }
    if (!status.ok()) ::unlink(e.path().c_str());
  }
  ::rmdir(work.c_str());
  return status;
}

}  // namespace dualpath
