// FaultInjector: carries out one FaultSpec (dualpath/replay/fault.h) during one system's replay in
// `cluster run`: it begins the fault when its trigger is met and undoes it when its duration is
// over, and records when each happened.
//
// The mechanisms are the testbed's own tools: `ip -n NETNS link set DEV down|up` for a node link;
// SIGKILL to the brick's glusterfsd (found by its brick path in /proc) and `gluster volume start
// VOL force` inside glusterd's mount namespace (as testbed.sh runs gluster) to start it again; for
// the service, the rack pool's lock manager and an engine, hooks of the caller's (which owns the
// service's and engines' Children and the run's rack pool); for the store kinds, the system's
// RunStore (which owns the store's children and watches the leader's Stats after a kill).
//
// Thread safety: one thread, the replay's: OnResult and Tick are called from the replayer's
// on_result and health hooks, so the service hooks may spawn and reap the service's Child (a child
// spawned on a thread dies with it: common/spawn.h). The destructor undoes a fault still active
// (a link left down would outlive the run).
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/replay/fault.h"
#include "dualpath/testbed/cluster.h"
#include "run_store.h"

namespace dualpath::replay {

class FaultInjector {
 public:
  struct ServiceHooks {
    std::function<Status()> kill;   // SIGKILL the service and reap it
    std::function<Status()> start;  // start it again (same socket, same arguments)
    // Whether the service lists the engine of `node` alive and reachable over the compute network
    // (ListEngines). Asked at every Tick from a comp-link fault's start until the engine is seen
    // cut off and back (FaultOutcome::cut_off_ns, back_ns). Empty: not asked.
    std::function<Result<bool>(const std::string& node)> engine_reachable;
    // rack-manager: SIGKILL the `pool serve` holding the lock-manager role of the run's own
    // non-coherent rack pool (RackPool::KillManager); returns the node it ran on. Empty: the run
    // has no such pool (the fault fails).
    std::function<Result<std::string>()> kill_rack_manager;
    // engine: SIGKILL the engine of `node` (the caller owns its Child, reaps it after the replay
    // and sweeps the node's pool). Empty: the fault fails.
    std::function<Status(const std::string& node)> kill_engine;
  };
  // `log` collects the output of every command run (ip, gluster). `store`: the system's store
  // (`cluster run --store`), null without one; the store kinds need it.
  FaultInjector(FaultSpec spec, const testbed::Cluster& cluster, std::string log,
                ServiceHooks service, RunStore* store = nullptr);
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;
  ~FaultInjector();

  void OnResult() { ++results_; }
  // Begins or ends the fault when due. `now` is the wall clock; the first call starts the
  // trigger's clock. An error (a command that failed) ends the replay.
  Status Tick(Nanos now);
  // The replay of `system` ended after `results` results: a fault still active is undone now; one
  // that never began is kFailedPrecondition (the run did not test what it was asked to).
  Status Finish(const std::string& system, size_t results);
  // The service is down by this fault (the caller's health check must not fail the run for it).
  bool ServiceDown() const { return active_ && spec_.kind == FaultKind::kService; }
  const FaultOutcome& outcome() const { return outcome_; }

 private:
  Status Begin();
  Status End();
  Status Run(const std::vector<std::string>& argv);
  Status SetLink(bool up);
  Status KillBrick();
  Status StartBrick();
  Status StoreBegin();
  Status StoreEnd();
  Status KillRackManager();
  Status KillEngine();
  // comp-link: one look at the service's view of the node's engine (cut off, back).
  void WatchCutOff(Nanos now);

  FaultSpec spec_;
  const testbed::Cluster& cluster_;
  std::string log_;
  ServiceHooks service_;
  RunStore* store_ = nullptr;
  uint64_t results_ = 0;
  Nanos first_tick_ = 0;
  bool active_ = false;
  FaultOutcome outcome_;
};

// One progress line: the fault, its length, results before and during it, the recovery time.
void PrintFault(const std::string& system, const FaultOutcome& f, std::ostream& progress);

}  // namespace dualpath::replay
