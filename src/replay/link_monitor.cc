#include "link_monitor.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "child.h"
#include "dualpath/common/log.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/testbed/link_stats.h"

namespace dualpath::replay {
namespace {

// Writes `bytes` of a non-constant pattern (GlusterFS has no dedup or compression, but zeros are
// the one thing a future layer might shortcut) with O_DIRECT-sized writes.
// Writes a new file at `path`; removes it again if the write fails (a full brick must not keep a
// partial probe). O_EXCL: a file already there is not ours, so it is neither truncated here nor
// removed by the caller.
Status WriteProbe(const std::string& path, uint64_t bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create " + path, errno);
  std::vector<uint64_t> buf((4u << 20) / sizeof(uint64_t));
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (uint64_t& v : buf) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = x;
  }
  uint64_t done = 0;
  while (done < bytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes - done, buf.size() * 8));
    const ssize_t w = write(fd, buf.data(), n);
    if (w <= 0) {
      const int err = w == 0 ? ENOSPC : errno;
      close(fd);
      unlink(path.c_str());
      return ErrnoStatus("write " + path, err);
    }
    done += static_cast<uint64_t>(w);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(path.c_str());
    return ErrnoStatus("close " + path, err);
  }
  return Status::Ok();
}

// "steady_link_mbps=377.2" in a `cluster read` log → 377.2e6.
Result<double> ParseSteadyRate(const std::string& text, const std::string& node) {
  const std::string key = "steady_link_mbps=";
  const size_t pos = text.rfind(key);
  if (pos == std::string::npos) {
    return Unavailable("goodput probe on " + node + " printed no rate: " + text);
  }
  return std::stod(text.substr(pos + key.size())) * 1e6;
}

}  // namespace

Result<LinkSample> ReadStorageCounters(const testbed::Cluster& cluster) {
  return ReadLinkCounters(cluster, testbed::Link::kStorage);
}

Result<LinkSample> ReadLinkCounters(const testbed::Cluster& cluster, testbed::Link link) {
  LinkSample s;
  s.t = WallClock().Now();
  for (const testbed::Node& n : cluster.nodes) {
    ASSIGN_OR_RETURN(testbed::LinkCounters c, testbed::ReadNodeLink(n, link));
    s.rx.push_back(c.rx_bytes);
    s.tx.push_back(c.tx_bytes);
  }
  return s;
}

void LinkSampler::Start(const testbed::Cluster& cluster, double interval_s) {
  Stop();
  stop_ = false;
  health_ = Status::Ok();
  samples_.clear();
  thread_ = std::thread([this, cluster, interval_s] {
    const auto interval = std::chrono::microseconds(static_cast<int64_t>(interval_s * 1e6));
    int failures = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      Result<LinkSample> s = ReadStorageCounters(cluster);
      lock.lock();
      if (s.ok()) {
        failures = 0;
        samples_.push_back(std::move(*s));
      } else if (s.status().code() == Code::kNotFound || ++failures >= kMaxFailures) {
        // `ip` could not find the namespace or the link: the cluster was taken down (or a node
        // lost its link) under the run. Retrying cannot bring it back; the run must end.
        health_ = Unavailable("cluster " + cluster.name +
                              " went away during the run (cluster down?): " + s.status().message());
        return;
      } else {
        log::Warn("cluster run: link sample failed: {}", s.status().ToString());
      }
      // A timed wait on the stop flag: the sampler wakes at once when stopped.
      cv_.wait_for(lock, interval, [this] { return stop_; });
    }
  });
}

Status LinkSampler::Health() {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

std::vector<LinkSample> LinkSampler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(samples_);
}

Result<std::vector<double>> MeasureGoodput(const testbed::Cluster& cluster, const std::string& mode,
                                           uint64_t bytes, const std::string& dualpath_bin,
                                           const std::string& work_dir, std::ostream& progress) {
  std::vector<double> out;
  if (mode == "nominal") {
    for (size_t i = 0; i < cluster.nodes.size(); ++i) {
      out.push_back(kNominalGoodputFraction * static_cast<double>(cluster.storage_rate_bps));
    }
    return out;
  }
  if (mode != "measure") {
    return InvalidArgument("--goodput '" + mode + "': expected measure or nominal");
  }
  const std::string rel = "replay-goodput-probe-" + std::to_string(getpid());
  const std::string admin_path = cluster.storage.admin_mount + "/" + rel;
  RETURN_IF_ERROR(WriteProbe(admin_path, bytes));
  // Every node at once: the links are independent, and this is how the run loads them.
  std::vector<Child> readers;
  Status status;
  for (const testbed::Node& n : cluster.nodes) {
    Result<Child> c = Child::Spawn({"ip", "netns", "exec", n.netns, dualpath_bin, "cluster", "read",
                                    n.mount + "/" + rel, "--streams", "4"},
                                   work_dir + "/goodput_" + n.name + ".log");
    if (!c.ok()) {
      status = c.status();
      break;
    }
    readers.push_back(std::move(*c));
  }
  for (size_t i = 0; i < readers.size() && status.ok(); ++i) {
    // In slices, so that a stop signal ends the probe within 200 ms (the readers are killed and
    // reaped below).
    Result<int> w = Timeout("goodput probe still running after 120 s");
    for (int slice = 0; slice < 600 && !w.ok() && w.status().code() == Code::kTimeout; ++slice) {
      if (Status stop = CheckStop(); !stop.ok()) {
        w = stop;
        break;
      }
      w = readers[i].Wait(200 * kNanosPerMilli);
    }
    if (!w.ok() && w.status().code() == Code::kCancelled) {
      status = w.status();
      break;
    }
    if (!w.ok() || *w != 0) {
      status = Unavailable("goodput probe on " + cluster.nodes[i].name + " failed (" +
                           (w.ok() ? DescribeWaitStatus(*w) : w.status().ToString()) +
                           "): " + readers[i].LogTail(400));
      break;
    }
    Result<double> rate = ParseSteadyRate(readers[i].LogTail(400), cluster.nodes[i].name);
    if (!rate.ok()) {
      status = rate.status();
      break;
    }
    out.push_back(*rate);
  }
  readers.clear();  // kills and reaps any reader still running (error path)
  std::error_code ec;
  std::filesystem::remove(admin_path, ec);
  RETURN_IF_ERROR(status);
  for (size_t i = 0; i < out.size(); ++i) {
    progress << "goodput " << cluster.nodes[i].name << ": " << out[i] / 1e6 << " Mbit/s ("
             << out[i] / static_cast<double>(cluster.storage_rate_bps) << " of nominal)\n";
  }
  return out;
}

}  // namespace dualpath::replay
