#include "fault_injector.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "child.h"
#include "dualpath/common/log.h"
#include "dualpath/common/numeric.h"
#include "dualpath/replay/replayer.h"

namespace dualpath::replay {
namespace {

constexpr Nanos kCommandTimeout = 30 * kNanosPerSecond;  // ip, gluster: seconds at most
constexpr int kBrickExitTimeoutMs = 5000;                // SIGKILL is not blocked by anything
constexpr Nanos kBrickStartTimeout = 20 * kNanosPerSecond;
constexpr int kBrickRetryMs = 250;

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The glusterfsd serving `brick` (its command line names the brick directory), or -1.
pid_t FindBrickPid(const std::string& brick) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadSmallFile(e.path().string() + "/comm") != "glusterfsd\n") continue;
    if (ReadSmallFile(e.path().string() + "/cmdline").find(brick) == std::string::npos) continue;
    return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// Waits (poll on a pidfd, no sleeping) until `pid`, which is not our child, has exited.
Status WaitGone(pid_t pid, int timeout_ms) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return Status::Ok();  // already gone (ESRCH)
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  const int n = ::poll(&p, 1, timeout_ms);
  ::close(fd);
  if (n == 1) return Status::Ok();
  return Timeout("pid " + std::to_string(pid) + " still running " +
                 std::to_string(timeout_ms / 1000) + " s after SIGKILL");
}

}  // namespace

FaultInjector::FaultInjector(FaultSpec spec, const testbed::Cluster& cluster, std::string log,
                             ServiceHooks service, RunStore* store)
    : spec_(std::move(spec)),
      cluster_(cluster),
      log_(std::move(log)),
      service_(std::move(service)),
      store_(store) {
  outcome_.spec = spec_;
}

FaultInjector::~FaultInjector() {
  // A service or store process the run is stopping stays down (its Child goes with the run).
  if (!active_ || spec_.kind == FaultKind::kService || FaultNeedsStore(spec_.kind)) return;
  // An error path left the fault in place: undo it, so no link stays down after the run.
  if (Status s = End(); !s.ok())
    log::Error("cluster run: undo fault {}: {}", spec_.ToString(), s.ToString());
}

Status FaultInjector::Tick(Nanos now) {
  if (first_tick_ == 0) first_tick_ = now;
  if (!outcome_.injected) {
    const bool due = spec_.after_s >= 0 ? now - first_tick_ >= FromSeconds(spec_.after_s)
                                        : results_ >= spec_.after_results;
    return due ? Begin() : Status::Ok();
  }
  WatchCutOff(now);
  if (active_ && WallClock().Now() - outcome_.start_ns >= FromSeconds(spec_.duration_s)) {
    return End();
  }
  return Status::Ok();
}

void FaultInjector::WatchCutOff(Nanos now) {
  if (spec_.kind != FaultKind::kComputeLink || !service_.engine_reachable) return;
  if (outcome_.back_ns != 0) return;  // seen cut off and back: nothing more to learn
  Result<bool> reachable = service_.engine_reachable(spec_.node);
  if (!reachable.ok()) {
    log::Debug("cluster run: list engines: {}", reachable.status().ToString());
    return;  // a look that failed is no observation
  }
  if (outcome_.cut_off_ns == 0) {
    // Only while the link is down: a cut-off seen afterwards is not this fault's.
    if (!*reachable && active_) {
      outcome_.cut_off_ns = now;
      log::Warn("cluster run: the service cut off {}'s engine {:.3f} s into the fault", spec_.node,
                ToSeconds(now - outcome_.start_ns));
    }
  } else if (*reachable && !active_) {
    outcome_.back_ns = now;
    log::Warn("cluster run: the service has {}'s engine back {:.3f} s after the fault", spec_.node,
              ToSeconds(now - outcome_.end_ns));
  }
}

Status FaultInjector::Finish(const std::string& system, size_t results) {
  if (active_) RETURN_IF_ERROR(End());
  if (store_ != nullptr && FaultNeedsStore(spec_.kind) && outcome_.injected) {
    const std::string seen = store_->EndWatch();
    if (!seen.empty()) outcome_.detail += "; " + seen;
  }
  if (!outcome_.injected) {
    return FailedPrecondition("--fault " + spec_.ToString() + " was never injected: the " + system +
                              " replay ended after " + std::to_string(results) + " results");
  }
  return Status::Ok();
}

void PrintFault(const std::string& system, const FaultOutcome& f, std::ostream& progress) {
  progress << system << ": fault " << f.spec.ToString() << " (" << f.detail << "), "
           << ToSeconds(f.end_ns - f.start_ns) << " s; " << f.results_before << " results before, "
           << f.results_during << " during; recovery ";
  if (f.recovery_s) {
    progress << *f.recovery_s << " s (fault end to the next completed request)";
  } else {
    progress << "none: no request completed after the fault";
  }
  if (f.spec.kind == FaultKind::kComputeLink) {
    progress << "; " << f.spec.node << "'s engine ";
    if (f.cut_off_ns > 0) {
      progress << "cut off by the service " << ToSeconds(f.cut_off_ns - f.start_ns)
               << " s into the fault (" << f.results_after_cut_off
               << " requests completed after that, during the fault), ";
      progress << (f.back_ns > 0
                       ? "back " + FormatNumber(ToSeconds(f.back_ns - f.end_ns)) + " s after it"
                       : std::string("not seen back"));
    } else {
      progress << "never cut off by the service";
    }
  }
  progress << "; " << f.scheduler_resubmissions << " re-submissions by the scheduler ("
           << f.requests_resubmitted << " requests)\n"
           << std::flush;
}

Status FaultInjector::Begin() {
  outcome_.injected = true;
  active_ = true;
  outcome_.start_ns = WallClock().Now();
  Status s;
  switch (spec_.kind) {
    case FaultKind::kStorageLink:
    case FaultKind::kComputeLink:
      s = SetLink(false);
      break;
    case FaultKind::kBrick:
      s = KillBrick();
      break;
    case FaultKind::kService:
      s = service_.kill();
      outcome_.detail = "service killed (SIGKILL)";
      break;
    case FaultKind::kStoreNode:
    case FaultKind::kStoreLeader:
      s = StoreBegin();
      break;
    case FaultKind::kRackManager:
      s = KillRackManager();
      break;
    case FaultKind::kEngine:
      s = KillEngine();
      break;
  }
  log::Warn("cluster run: fault {} begins after {} results: {}", spec_.ToString(), results_,
            s.ok() ? outcome_.detail : s.ToString());
  if (!s.ok()) return s.WithContext("fault " + spec_.ToString());
  // A zero-length fault (kill and restart) ends at once.
  return spec_.duration_s == 0 ? End() : Status::Ok();
}

Status FaultInjector::End() {
  active_ = false;
  Status s;
  switch (spec_.kind) {
    case FaultKind::kStorageLink:
    case FaultKind::kComputeLink:
      s = SetLink(true);
      break;
    case FaultKind::kBrick:
      s = StartBrick();
      break;
    case FaultKind::kService:
      s = service_.start();
      outcome_.detail += "; started again";
      break;
    case FaultKind::kStoreNode:
    case FaultKind::kStoreLeader:
      s = StoreEnd();
      break;
    case FaultKind::kRackManager:
      break;  // not undone: a standby took the role
    case FaultKind::kEngine:
      break;  // not undone: the service rescheduled its requests
  }
  outcome_.end_ns = WallClock().Now();
  log::Warn("cluster run: fault {} ends after {} s: {}", spec_.ToString(),
            FormatNumber(ToSeconds(outcome_.end_ns - outcome_.start_ns)),
            s.ok() ? outcome_.detail : s.ToString());
  return s.WithContext("undo fault " + spec_.ToString());
}

Status FaultInjector::Run(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(Child c, Child::Spawn(argv, log_));
  Result<int> w = c.Wait(kCommandTimeout);
  if (!w.ok()) {
    c.Stop(kNanosPerSecond);
    return Timeout(argv[0] + " did not finish within 30 s; log " + log_);
  }
  if (*w != 0) {
    return Unavailable(argv[0] + " " + argv.back() + " failed (" + DescribeWaitStatus(*w) +
                       "); log " + log_ + ":\n" + c.LogTail(800));
  }
  return Status::Ok();
}

Status FaultInjector::SetLink(bool up) {
  const testbed::Node* n = cluster_.FindNode(spec_.node);
  if (n == nullptr) return InvalidArgument("--fault: no node '" + spec_.node + "'");
  const std::string& dev = spec_.kind == FaultKind::kStorageLink ? n->storage_if : n->compute_if;
  outcome_.detail += up ? "; up again" : n->netns + " " + dev + " down";
  return Run({"ip", "-n", n->netns, "link", "set", dev, up ? "up" : "down"});
}

Status FaultInjector::StoreBegin() {
  if (store_ == nullptr)
    return FailedPrecondition("--fault " + spec_.ToString() + " needs --store");
  Result<std::string> d =
      spec_.kind == FaultKind::kStoreNode ? store_->KillNode(spec_.node) : store_->KillLeader();
  if (!d.ok()) return d.status();
  outcome_.detail = *d;
  return Status::Ok();
}

Status FaultInjector::KillRackManager() {
  if (!service_.kill_rack_manager) {
    return FailedPrecondition("--fault " + spec_.ToString() +
                              " needs a non-coherent rack pool of the run's own");
  }
  ASSIGN_OR_RETURN(const std::string node, service_.kill_rack_manager());
  outcome_.killed_node = node;
  outcome_.detail = "the rack pool's lock manager (pool serve on " + node + ") killed (SIGKILL)";
  return Status::Ok();
}

Status FaultInjector::KillEngine() {
  if (!service_.kill_engine) {
    return FailedPrecondition("--fault " + spec_.ToString() + ": this run cannot kill an engine");
  }
  RETURN_IF_ERROR(service_.kill_engine(spec_.node));
  outcome_.killed_node = spec_.node;
  outcome_.detail = "engine on " + spec_.node + " killed (SIGKILL)";
  return Status::Ok();
}

Status FaultInjector::StoreEnd() {
  Result<std::string> d = spec_.kind == FaultKind::kStoreNode ? store_->RestartNode(spec_.node)
                                                              : store_->RestartMaster();
  if (!d.ok()) return d.status();
  outcome_.detail += "; " + *d;
  return Status::Ok();
}

Status FaultInjector::KillBrick() {
  const pid_t pid = FindBrickPid(cluster_.storage.brick);
  if (pid <= 0) return NotFound("no glusterfsd serves brick " + cluster_.storage.brick);
  if (::kill(pid, SIGKILL) != 0) return IoError("kill -9 glusterfsd " + std::to_string(pid), errno);
  RETURN_IF_ERROR(WaitGone(pid, kBrickExitTimeoutMs));
  outcome_.detail = "brick glusterfsd pid " + std::to_string(pid) + " killed (SIGKILL)";
  return Status::Ok();
}

Status FaultInjector::StartBrick() {
  // glusterd's CLI socket lives in its private mount namespace (docs/testbed.md): enter it, as
  // testbed.sh's gcli does.
  const std::string pid_file = cluster_.state_dir + "/pids/glusterd.pid";
  const std::string gpid = ReadSmallFile(pid_file);
  if (gpid.empty() || gpid.find_first_not_of("0123456789\n") != std::string::npos) {
    return NotFound("glusterd pid file " + pid_file + " is empty or malformed");
  }
  const std::vector<std::string> start = {"nsenter",
                                          "-t",
                                          gpid.substr(0, gpid.find('\n')),
                                          "--mount",
                                          "--net",
                                          "--",
                                          "gluster",
                                          "--mode=script",
                                          "--log-file=" + cluster_.state_dir + "/log/cli.log",
                                          "--glusterd-sock=/run/gluster/glusterd.socket",
                                          "volume",
                                          "start",
                                          cluster_.storage.volume,
                                          "force"};
  // glusterd learns of the brick's death from its disconnect, asynchronously: until it has, `start
  // force` succeeds without starting anything (seen within ~0.1 s of the kill). So: start, look
  // for the new glusterfsd, and try again a moment later, for at most kBrickStartTimeout. glusterd
  // offers no event to wait on.
  const Nanos deadline = WallClock().Now() + kBrickStartTimeout;
  for (int attempt = 1;; ++attempt) {
    RETURN_IF_ERROR(Run(start));
    if (const pid_t pid = FindBrickPid(cluster_.storage.brick); pid > 0) {
      outcome_.detail += "; started again by `gluster volume start " + cluster_.storage.volume +
                         " force` (attempt " + std::to_string(attempt) + "), glusterfsd pid " +
                         std::to_string(pid);
      return Status::Ok();
    }
    if (WallClock().Now() > deadline) {
      return Timeout("no glusterfsd for brick " + cluster_.storage.brick + " after " +
                     std::to_string(attempt) + " `gluster volume start force`; log " + log_);
    }
    ::poll(nullptr, 0, kBrickRetryMs);  // a retry interval for an external daemon
  }
}

}  // namespace dualpath::replay
