// Bringing an emulated cluster up and down (what `dualpath cluster up|down` do).
//
// ClusterUp creates, for the planned Cluster: one network namespace per node, a storage namespace
// running glusterd with one brick, a compute switch namespace, tbf- (or, with DSCP priority,
// htb-) shaped veth links, and a GlusterFS FUSE mount per node whose client runs in the node's
// namespace. Everything it writes lives in Cluster::state_dir; the cluster owns the namespaces
// "dp-<name>.*" and the processes inside them. The mechanism is the shell script
// scripts/testbed/testbed.sh, embedded in the binary at build time (EmbeddedScript()).
//
// ClusterDown stops those processes by PID, unmounts, deletes the namespaces (and with them
// every interface and qdisc) and removes state_dir. It is idempotent and also cleans up after an
// `up` that crashed half-way (it finds the namespaces by name).
//
// A lock per cluster name: both take an exclusive FileLock (common/file.h) on
// <state root>/<name>.lock for as long as they run, so two `up` of one name started at the same
// moment cannot tear each other down: one builds the cluster, the other fails at once with
// kUnavailable "cluster 'N' is in use by another `dualpath cluster up` or `down` (pid P holds
// LOCK)" and touches nothing; a `down` while an `up` builds is refused the same way. The lock dies
// with its holder (a killed `up` leaves none).
//
// Both need root (kTestbedNotRoot otherwise). Thread safety: calls for one name from two threads
// of one process exclude each other through the lock as two processes would.
#pragma once

#include <string>
#include <string_view>

#include "dualpath/common/status.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::testbed {

struct UpReport {
  double seconds = 0;      // wall time of the whole bring-up
  std::string script_log;  // the script's own output (includes a "timing_ms ..." line)
};

// Plans (PlanCluster), checks root, takes the name's lock (kUnavailable while another up or down
// of it runs) and checks that no cluster of that name exists (kTestbedExists), builds it and
// writes <state_dir>/cluster.json. On failure everything created is torn down again (under the
// same lock: it is all this call's) and the error names the step that failed
// (kTestbedCommandFailed).
Result<Cluster> ClusterUp(const ClusterOptions& options, UpReport* report = nullptr);

// Tears down cluster `name` under `state_root` (empty: StateRoot()) under the name's lock
// (kUnavailable while another `up` or `down` of it runs). OK if nothing exists.
Status ClusterDown(std::string_view name, std::string_view state_root = {});

// True if the state directory or any namespace of the cluster exists.
bool ClusterExists(std::string_view name, std::string_view state_root = {});

// Fails with kTestbedNotRoot unless the effective uid is 0.
Status RequireRoot(std::string_view what);

// The text of scripts/testbed/testbed.sh as of the build.
std::string_view EmbeddedScript();

}  // namespace dualpath::testbed
