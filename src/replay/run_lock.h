// An exclusive claim on a testbed cluster by one `dualpath cluster run`. Two runs given the same
// --name would otherwise share the cluster: the second keeps the first's cluster "already up",
// both start engines and a control service on it, and the first to finish tears it down under the
// other. The claim is a FileLock (common/file.h: an flock(2)) on DIR/NAME.lock, so it dies with the
// process that holds it (a killed run never leaves a stale claim); the file keeps the holder's pid
// for the error message.
//
// Thread safety: a RunLock is owned by one thread; distinct RunLocks may be used concurrently.
#pragma once

#include <string>
#include <utility>

#include "dualpath/common/file.h"
#include "dualpath/common/status.h"

namespace dualpath::replay {

class RunLock {
 public:
  // Creates `dir` if needed and takes the claim on `cluster`, or fails with kUnavailable naming
  // the holder's pid when another RunLock (in any process) holds it.
  static Result<RunLock> Acquire(const std::string& dir, const std::string& cluster);

  RunLock(RunLock&& other) noexcept = default;
  RunLock& operator=(RunLock&& other) noexcept = default;
  ~RunLock() = default;  // releases the claim

  const std::string& path() const { return lock_.path(); }

 private:
  explicit RunLock(FileLock lock) : lock_(std::move(lock)) {}
  FileLock lock_;
};

}  // namespace dualpath::replay
