// Files the user names: the one way every reader opens an input file and every command writes an
// output file (only regular files are read as data; a command removes only what it created).
//
// Readers: a path given on the command line or in a config may be anything, a directory, a FIFO
// with no writer (open would block forever), a character device such as /dev/zero (a read never
// ends) or a file far larger than any input. OpenRegularFile opens without blocking, fstat()s the
// opened descriptor (not the name, so a swap between check and use changes nothing) and refuses
// anything that is not a regular file with kInvalidArgument "<what> <path> is not a regular file
// (a directory)", which the CLI reports as bad input (exit 2). ReadRegularFile also refuses files
// above a size limit before reading them.
//
// Writers: WriteOutputFile writes the whole text, checks every write and the close, and replaces a
// regular file only once the new content is complete: a private temporary file in the target's
// directory (mkostemp: O_CREAT | O_EXCL, so it is always a new file of ours, never a name someone
// planted, and never followed through a symlink), renamed over the target. A full disk or a
// read-only directory leaves no partial file behind; a target name of up to 255 bytes works (the
// temporary's name is short and fixed). The target itself (docs/cli.md "Output files"):
//   - missing or a regular file: replaced as above;
//   - a symbolic link: refused (kInvalidArgument), never written through and never replaced: an
//     output never lands anywhere but at the path the user named;
//   - a character device (/dev/null, /dev/full, a terminal): written in place;
//   - a directory, a FIFO, a block device or a socket: refused (kInvalidArgument): a FIFO with no
//     reader would block forever, a block device would be overwritten.
// CreateOutputFile applies the same rules to an output written as a stream (a log), opened in
// place and truncated instead of replaced.
//
// Locks: FileLock is an exclusive flock(2) claim on a lock file, dropped when its holder closes it
// or dies (a killed command never leaves a stale claim); the file records the holder's pid.
//
// Thread safety: stateless functions; the returned descriptor belongs to the caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "dualpath/common/status.h"

namespace dualpath {

// Default bound on an input file read whole into memory: larger than any trace, config or block
// file the project reads, small enough that a wrong path cannot exhaust memory.
inline constexpr uint64_t kMaxInputFileBytes = uint64_t{1} << 30;

// An owned file descriptor, closed on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Opens `path` read-only (plus `extra_flags`, e.g. O_DIRECT) if it is a regular file. `what` names
// the input in messages ("--config", "WEKA trace"). Errors: kInvalidArgument for a path that is
// not a regular file, ErrnoStatus (kNotFound, kPermissionDenied, kIoError...) for a failed open.
// Never blocks on a FIFO.
Result<UniqueFd> OpenRegularFile(const std::string& path, std::string_view what,
                                 int extra_flags = 0);

// The whole content of regular file `path`. Also kInvalidArgument when it is larger than
// `max_bytes` ("<what> <path> is N bytes, more than the limit of M").
Result<std::string> ReadRegularFile(const std::string& path, std::string_view what,
                                    uint64_t max_bytes = kMaxInputFileBytes);

// ReadRegularFile for a file the user named as input (a flag, a config field): a path that does
// not exist is bad input, kInvalidArgument "<what> <path> does not exist", not the runtime
// kNotFound that ReadRegularFile returns (which callers probing for state, such as the testbed's
// cluster.json, rely on). docs/cli.md: a missing input file exits 2 in every command.
Result<std::string> ReadInputFile(const std::string& path, std::string_view what,
                                  uint64_t max_bytes = kMaxInputFileBytes);

// ReadInputFile for a secret (a TLS private key, the transfer token): also kInvalidArgument
// "<what> <path> has mode 0644: a secret must be owner-only (chmod 600)" when group or others have
// any permission on it, and "<what> <path> is empty" for an empty file.
Result<std::string> ReadSecretFile(const std::string& path, std::string_view what,
                                   uint64_t max_bytes);

// kInvalidArgument "<what> <path> is not a directory" unless `path` is a directory (following
// symlinks); kInvalidArgument "... does not exist" for a missing path; ErrnoStatus when it cannot
// be looked up otherwise.
Status CheckDirectory(const std::string& path, std::string_view what);

// Writes `text` to `path` as described in the header comment. Errors name `what` and the path:
// ErrnoStatus for I/O failures (no space, read-only, missing directory: kIoError, kNotFound,
// kPermissionDenied, kStorageNoSpace), kInvalidArgument for a target that is a symbolic link, a
// directory, a FIFO, a block device or a socket.
Status WriteOutputFile(const std::string& path, std::string_view text, std::string_view what);

// Opens `path` for writing under the rules of WriteOutputFile (created 0644 & ~umask if missing,
// truncated if a regular file, a character device opened as it is; a symbolic link or another
// kind of file refused with kInvalidArgument), for output written as it is produced.
Result<UniqueFd> CreateOutputFile(const std::string& path, std::string_view what);

// An exclusive claim on a lock file, taken without waiting. Move-only; the destructor releases it.
class FileLock {
 public:
  // Creates `path` if needed (0644; never through a symbolic link) and takes the claim. When
  // another FileLock holds it (in any process, or in this one through another open), kUnavailable
  // with the message "pid N holds LOCK" (N: what the holder recorded, "unknown" if nothing):
  // callers say what is in use and put this in parentheses. ErrnoStatus when the file cannot be
  // opened.
  static Result<FileLock> TryAcquire(const std::string& path);

  FileLock(FileLock&& other) noexcept = default;
  FileLock& operator=(FileLock&& other) noexcept = default;
  ~FileLock() = default;  // closing the descriptor drops the flock

  const std::string& path() const { return path_; }

 private:
  FileLock(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

// Plot output (`--plot DIR` of sim and cluster run). PreparePlotDir creates `dir` if needed and
// refuses a path that is not a directory or that the gnuplot script could not quote (a quote or a
// newline in it): kInvalidArgument. RunGnuplot runs `gnuplot SCRIPT` without a shell, stderr to
// `dir`/gnuplot.log (CreateOutputFile), and turns a missing gnuplot, a signal or a non-zero exit
// into one Status naming the log. gnuplot opens its `set output` files itself, following symlinks,
// so it runs in a private directory made inside `dir` (mode 0700: no one else can plant a name in
// it) and the script must name its outputs relative ('jct.png'); each regular file it wrote there
// is then renamed into `dir`, which replaces whatever was at that name (a symlink included)
// without writing through it.
Status PreparePlotDir(const std::string& dir);
Status RunGnuplot(const std::string& dir, const std::string& script_path);

}  // namespace dualpath
