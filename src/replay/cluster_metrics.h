// `dualpath cluster run --metrics` (docs/metrics.md, docs/replay.md): where Prometheus scrapes the
// run's processes.
//
// The orchestrator binds one listening socket per process slot (the scheduler service, then one
// per node in cluster order) on `host` (127.0.0.1 by default) in the host's network namespace,
// where Prometheus runs, and keeps them for the whole run. Each system's service and engines
// inherit their slot's socket (`--metrics-addr fd:N`), so
//   - engines inside the testbed's node namespaces (whose addresses exist only there) are
//     reachable from the host, without touching the testbed's links or routes;
//   - a slot keeps its address from one system to the next: one scrape config for the whole run,
//     and each system's series are told apart by their `system` label.
// Each process waits (up to `--metrics-wait-s`) for a scrape after its work ended, so the final
// counts of every system are read before it exits.
//
// Ownership: owns the sockets (closed when destroyed). Thread safety: const methods from any
// thread.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "dualpath/common/file.h"
#include "dualpath/common/status.h"
#include "dualpath/testbed/cluster.h"

namespace dualpath::replay {

class MetricsEndpoints {
 public:
  // Binds HOST:0 for every slot. Errors name --metrics-host.
  static Result<std::unique_ptr<MetricsEndpoints>> Open(const testbed::Cluster& cluster,
                                                        const std::string& host);

  static constexpr size_t kServiceSlot = 0;
  static size_t NodeSlot(size_t node_index) { return node_index + 1; }

  // The slot's listening socket, handed to its process (Child::Spawn's inherit_fds).
  int Fd(size_t slot) const { return slots_[slot].fd.get(); }
  // "--metrics-addr fd:N --metrics-wait-s W" for the slot's process.
  std::vector<std::string> Args(size_t slot, double wait_s) const;
  // One line per slot: "metrics: scrape http://ADDR/metrics (NAME)".
  std::string Describe() const;
  // A Prometheus file_sd target file (JSON) and a complete prometheus.yml scraping every slot
  // every `interval_s`, with labels process=<slot name> and cluster=<cluster name>.
  std::string FileSdJson() const;
  std::string PrometheusYaml(double interval_s) const;

  // Args(slot, wait_s) and {Fd(slot)} of `m`, or nothing without metrics (m null).
  static std::vector<std::string> ArgsOf(const MetricsEndpoints* m, size_t slot, double wait_s);
  static std::vector<int> FdsOf(const MetricsEndpoints* m, size_t slot);

 private:
  struct Slot {
    std::string name;  // "service", or the node's name
    UniqueFd fd;
    std::string address;
  };
  std::string cluster_;
  std::vector<Slot> slots_;
};

struct ClusterRunOptions;

// With options.metrics: opens the endpoints, writes --metrics-config / --metrics-targets if given
// and prints where to scrape; null without.
Result<std::unique_ptr<MetricsEndpoints>> OpenRunMetrics(const ClusterRunOptions& options,
                                                         const testbed::Cluster& cluster,
                                                         std::ostream& progress);

}  // namespace dualpath::replay
