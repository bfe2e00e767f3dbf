// An exclusive claim on a testbed cluster by one `dualpath cluster run`. Two runs given the same
// --name would otherwise share the cluster: the second keeps the first's cluster "already up",
// both start engines and a control service on it, and the first to finish tears it down under the
// other. The claim is an flock(2) on DIR/NAME.lock, so it dies with the process that holds it (a
// killed run never leaves a stale claim); the file keeps the holder's pid for the error message.
//
// Thread safety: a RunLock is owned by one thread; distinct RunLocks may be used concurrently.
#pragma once

#include <string>

#include "dualpath/common/status.h"

namespace dualpath::replay {

class RunLock {
 public:
  // Creates `dir` if needed and takes the claim on `cluster`, or fails with kUnavailable naming
  // the holder's pid when another RunLock (in any process) holds it.
  static Result<RunLock> Acquire(const std::string& dir, const std::string& cluster);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();  // releases the claim

  const std::string& path() const { return path_; }

 private:
  RunLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace dualpath::replay
