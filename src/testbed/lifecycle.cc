// ClusterUp / ClusterDown: run the embedded script with a plan computed in C++.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "dualpath/common/clock.h"
#include "dualpath/common/file.h"
#include "dualpath/common/log.h"
#include "dualpath/testbed/testbed.h"
#include "testbed/subprocess.h"

namespace dualpath::testbed {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kNetnsDir = "/var/run/netns";

// Runs `bash -c <script> testbed.sh args...`.
Result<ProcessResult> RunScript(std::vector<std::string> args) {
  std::vector<std::string> argv = {"bash", "-c", std::string(EmbeddedScript()), "testbed.sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv);
}

// The script's own error lines ("testbed: ..."), or its last line: what the user needs to see.
std::string ErrorLines(const std::string& output) {
  std::string lines;
  std::string last;
  size_t pos = 0;
  while (pos < output.size()) {
    size_t end = output.find('\n', pos);
    if (end == std::string::npos) {
      end = output.size();
    }
    std::string line = output.substr(pos, end - pos);
    if (line.rfind("testbed: ", 0) == 0) {
      lines += (lines.empty() ? "" : "; ") + line.substr(9);
    }
    if (!line.empty()) {
      last = line;
    }
    pos = end + 1;
  }
  return lines.empty() ? last : lines;
}

// The name's lock (testbed.h): kUnavailable naming the holder while another up or down runs.
Result<FileLock> LockName(std::string_view name, const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    return IoError(fmt::format("create state root {}: {}", root, ec.message()));
  }
  Result<FileLock> lock = FileLock::TryAcquire(fmt::format("{}/{}.lock", root, name));
  if (lock.status().code() == Code::kUnavailable) {
    return Unavailable(fmt::format(
        "cluster '{}' is in use by another `dualpath cluster up` or `down` ({}); wait for it to "
        "finish or pick another --name",
        name, lock.status().message()));
  }
  return lock;
}

// The teardown itself; the caller holds the name's lock.
Status DownLocked(std::string_view name, const std::string& root) {
  ASSIGN_OR_RETURN(ProcessResult r, RunScript({"down", StateDir(root, name), std::string(name)}));
  if (r.exit_code != 0) {
    return Status(Code::kTestbedCommandFailed,
                  fmt::format("tearing down '{}': {}", name, ErrorLines(r.output)));
  }
  return Status::Ok();
}

}  // namespace

Status RequireRoot(std::string_view what) {
  if (geteuid() != 0) {
    return Status(Code::kTestbedNotRoot,
                  fmt::format("{} needs root: it creates network namespaces, shapes links with "
                              "tc and mounts GlusterFS (run it with sudo or as root)",
                              what));
  }
  return Status::Ok();
}

bool ClusterExists(std::string_view name, std::string_view state_root) {
  const std::string root = state_root.empty() ? StateRoot() : std::string(state_root);
  std::error_code ec;
  if (fs::exists(StateDir(root, name), ec)) {
    return true;
  }
  const std::string prefix = NetnsPrefix(name);
  for (const auto& entry : fs::directory_iterator(kNetnsDir, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) {
      return true;
    }
  }
  return false;
}

Result<Cluster> ClusterUp(const ClusterOptions& options, UpReport* report) {
  ASSIGN_OR_RETURN(Cluster c, PlanCluster(options));
  RETURN_IF_ERROR(RequireRoot("dualpath cluster up"));
  const std::string root = options.state_root.empty() ? StateRoot() : options.state_root;
  // Held until this returns: a second `up` of the name started at the same moment fails here and
  // touches nothing (before, both passed the check below and the loser tore the winner down).
  ASSIGN_OR_RETURN(FileLock lock, LockName(c.name, root));
  if (ClusterExists(c.name, root)) {
    return Status(Code::kTestbedExists,
                  fmt::format("cluster '{}' already exists (state {}, namespaces {}*); run "
                              "`dualpath cluster down --name {}` first, or pick another --name",
                              c.name, c.state_dir, NetnsPrefix(c.name), c.name));
  }
  std::vector<std::string> args = {"up",
                                   c.state_dir,
                                   c.name,
                                   std::to_string(c.storage_rate_bps),
                                   std::to_string(c.compute_rate_bps),
                                   c.dscp_priority ? "1" : "0",
                                   fmt::format("{}/{}", c.storage.address, c.storage.prefix_len),
                                   std::to_string(c.compute.prefix_len)};
  for (const Node& n : c.nodes) {
    args.push_back(fmt::format("{}:{}:{}", n.name, n.storage_addr, n.compute_addr));
  }
  const Nanos start = SteadyClock::Default().Now();
  Result<ProcessResult> r = RunScript(args);
  Status failure;
  if (!r.ok()) {
    failure = r.status();
  } else if (r->exit_code != 0) {
    failure = Status(Code::kTestbedCommandFailed,
                     fmt::format("bringing up '{}': {}", c.name, ErrorLines(r->output)));
  } else {
    failure =
        WriteOutputFile(c.state_dir + "/cluster.json", ClusterToJson(c), "cluster description");
  }
  if (!failure.ok()) {
    // Leave nothing half-built behind: everything of this name is ours (we hold its lock).
    Status down = DownLocked(c.name, root);
    if (!down.ok()) {
      log::Error("cleanup after failed bring-up: {}", down.ToString());
    }
    return failure;
  }
  if (report != nullptr) {
    report->seconds = ToSeconds(SteadyClock::Default().Now() - start);
    report->script_log = r->output;
  }
  return c;
}

Status ClusterDown(std::string_view name, std::string_view state_root) {
  RETURN_IF_ERROR(ValidateClusterName(name));
  RETURN_IF_ERROR(RequireRoot("dualpath cluster down"));
  const std::string root = state_root.empty() ? StateRoot() : std::string(state_root);
  ASSIGN_OR_RETURN(FileLock lock, LockName(name, root));
  return DownLocked(name, root);
}

}  // namespace dualpath::testbed
