// Storage-link counters of a running cluster, for `cluster run`: one reading of every node, a
// background sampler (the time series behind the Figure-15-style plots and the steady-state
// utilization), and the goodput measurement each utilization is relative to.
//
// Thread safety: ReadStorageCounters and MeasureGoodput are free functions; a LinkSampler's
// Start/Stop are called by its owner thread, the sampling runs on a thread of its own.
#pragma once

#include <condition_variable>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/replay/results.h"
#include "dualpath/testbed/cluster.h"
#include "dualpath/testbed/link_stats.h"

namespace dualpath::replay {

// Cumulative storage-link rx/tx bytes of every node (cluster order), stamped with the wall clock.
Result<LinkSample> ReadStorageCounters(const testbed::Cluster& cluster);
// The same for another link of every node (the compute links: what a run's KV substrate sends).
Result<LinkSample> ReadLinkCounters(const testbed::Cluster& cluster, testbed::Link link);

class LinkSampler {
 public:
  LinkSampler() = default;
  LinkSampler(const LinkSampler&) = delete;
  LinkSampler& operator=(const LinkSampler&) = delete;
  ~LinkSampler() { Stop(); }

  void Start(const testbed::Cluster& cluster, double interval_s);
  // Stops and joins the thread; returns the samples taken (failed readings are skipped).
  std::vector<LinkSample> Stop();
  // Ok while the links can be read. Once a node's namespace or link is gone (`cluster down` under
  // a run), or kMaxFailures readings in a row failed, kUnavailable naming the cluster: the run
  // cannot go on, and the sampler has stopped sampling. Callable from any thread.
  Status Health();

  static constexpr int kMaxFailures = 8;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Status health_;
  std::vector<LinkSample> samples_;
  std::thread thread_;
};

// Per node, the storage link's goodput in counter bits per second. "nominal": 0.993 x the shaped
// rate. "measure": writes a file of `bytes` through the admin mount, reads it through every
// node's mount at once with `dualpath cluster read` inside each node's namespace (O_DIRECT, 4
// streams) and takes each node's steady link rate; the file is removed afterwards.
Result<std::vector<double>> MeasureGoodput(const testbed::Cluster& cluster, const std::string& mode,
                                           uint64_t bytes, const std::string& dualpath_bin,
                                           const std::string& work_dir, std::ostream& progress);

// A saturated link's counter rate over its nominal rate (TSO super-packets vs tbf's per-segment
// charge; docs/testbed.md): 8948 / (8948 + 66) with the testbed's MTU 9000 (0.956 at MTU 1500).
inline constexpr double kNominalGoodputFraction = 0.993;

}  // namespace dualpath::replay
