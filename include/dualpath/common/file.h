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
// regular file only once the new content is complete (a temporary file in the same directory,
// renamed over it), so a full disk or a read-only directory leaves no partial file behind. A
// target that already exists and is a device or FIFO (/dev/stdout, /dev/full) is written in place;
// a directory is refused.
//
// Thread safety: stateless functions; the returned descriptor belongs to the caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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
// kPermissionDenied, kStorageNoSpace), kInvalidArgument for a path that is a directory.
Status WriteOutputFile(const std::string& path, std::string_view text, std::string_view what);

// Plot output (`--plot DIR` of sim and cluster run). PreparePlotDir creates `dir` if needed and
// refuses a path that is not a directory or that the gnuplot script could not quote (a quote or a
// newline in it): kInvalidArgument. RunGnuplot runs `gnuplot SCRIPT` without a shell, stderr to
// `log_path`, and turns a missing gnuplot, a signal or a non-zero exit into one Status naming the
// log.
Status PreparePlotDir(const std::string& dir);
Status RunGnuplot(const std::string& script_path, const std::string& log_path);

}  // namespace dualpath
