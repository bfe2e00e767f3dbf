#include "run_lock.h"

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
  Result<FileLock> lock = FileLock::TryAcquire(dir + "/" + cluster + ".lock");
  if (lock.status().code() == Code::kUnavailable) {
    return Unavailable("cluster '" + cluster + "' is in use by another `dualpath cluster run` (" +
                       lock.status().message() + "); wait for it to finish or use another --name");
  }
  if (!lock.ok()) return lock.status();
  return RunLock(std::move(lock).value());
}

}  // namespace dualpath::replay
