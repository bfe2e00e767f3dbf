#include "dualpath/replay/rack_pool.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "child.h"
#include "dualpath/common/file.h"
#include "dualpath/common/log.h"
#include "dualpath/common/numeric.h"
#include "dualpath/pool/pool.h"

namespace dualpath::replay {

using nlohmann::json;

struct RackPool::Servers {
  std::vector<Child> children;  // children[i] serves info_.servers[i]
};

namespace {

std::string SelfBinary(const std::string& given) {
  if (!given.empty()) return given;
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  return ec ? "dualpath" : self;
}

std::string InfoJson(const RackPoolInfo& info) {
  json servers = json::array();
  for (const RackPoolInfo::Server& s : info.servers) {
    servers.push_back({{"node", s.node}, {"rack_node", s.rack_node}, {"pid", s.pid}});
  }
  return json{{"path", info.path},
              {"model", info.model},
              {"bytes", info.bytes},
              {"lease_ms", info.lease_ms},
              {"servers", servers}}
             .dump(2) +
         "\n";
}

// Attaches without taking the manager role and without a background thread: for one look.
Result<std::unique_ptr<pool::Pool>> Probe(const std::string& path) {
  pool::OpenOptions o;
  o.background_thread = false;
  o.lock_manager = false;  // a probe must see a server grant, not grant itself
  return pool::Pool::Open(path, o);
}

}  // namespace

std::string DefaultRackPoolPath(const testbed::Cluster& cluster) {
  return "/dev/shm/" + cluster.name + "-rack.pool";
}

std::string RackPoolStatePath(const testbed::Cluster& cluster) {
  return cluster.state_dir + "/rack_pool.json";
}

RackPool::RackPool(RackPoolInfo info, const testbed::Cluster& cluster)
    : info_(std::move(info)), cluster_(cluster), servers_(std::make_unique<Servers>()) {}

RackPool::~RackPool() {
  if (detached_) return;
  for (Child& c : servers_->children) {
    if (c.running()) c.Stop(2 * kNanosPerSecond);
  }
  if (Status s = RemoveRackPool(cluster_, info_); !s.ok()) {
    log::Warn("rack pool {}: {}", info_.path, s.ToString());
  }
}

void RackPool::Detach() {
  for (Child& c : servers_->children) c.Detach();
  detached_ = true;
}

Result<std::string> RackPool::KillManager() {
  ASSIGN_OR_RETURN(std::unique_ptr<pool::Pool> probe, Probe(info_.path));
  const pool::PoolStats st = probe->Stats();
  if (!st.lock_error.empty()) return Status(Code::kTimeout, st.lock_error);
  for (size_t i = 0; i < info_.servers.size() && i < servers_->children.size(); ++i) {
    Child& c = servers_->children[i];
    if (c.running() && c.pid() == st.manager_pid) {
      c.Signal(SIGKILL);
      (void)c.Wait(5 * kNanosPerSecond);  // reaped: its pid is really gone
      return info_.servers[i].node;
    }
  }
  return NotFound(fmt::format("rack pool {}: no server of it holds the lock-manager role (pid {})",
                              info_.path, st.manager_pid));
}

Result<std::unique_ptr<RackPool>> StartRackPool(const testbed::Cluster& cluster,
                                                const RackPoolOptions& options,
                                                std::ostream& progress) {
  ASSIGN_OR_RETURN(pool::MemoryModel model, pool::ParseMemoryModel(options.model));
  RETURN_IF_ERROR(CheckCountRange("--rack-pool-size", options.bytes, kMinRackPoolBytes,
                                  kMaxRackPoolBytes, "bytes"));
  RETURN_IF_ERROR(CheckCountRange("--rack-pool-lease-ms", options.lease_ms, kMinRackPoolLeaseMs,
                                  kMaxRackPoolLeaseMs, "ms"));
  if (cluster.nodes.empty()) return InvalidArgument("rack pool: the cluster has no nodes");
  RackPoolInfo info;
  info.path = options.path.empty() ? DefaultRackPoolPath(cluster) : options.path;
  info.model = std::string(pool::MemoryModelName(model));
  info.bytes = options.bytes;
  info.lease_ms = options.lease_ms;

  pool::Geometry g;
  g.model = model;
  g.lease = static_cast<Nanos>(options.lease_ms) * kNanosPerMilli;
  // Rack node i is cluster node i (engines pass --rack-node i); at least the default 8.
  g.num_nodes = std::max<uint32_t>(8, static_cast<uint32_t>(cluster.nodes.size()));
  g.max_procs = 64;
  // Objects are per request and layer: a modest index (power of two) covers every one in flight.
  g.index_capacity = 1u << 14;
  const uint64_t chunks = (options.bytes + g.chunk_bytes - 1) / g.chunk_bytes;
  g.region_bytes = pool::RegionBytesFor(g, chunks);
  // Create never replaces an existing file (kAlreadyExists): a region of someone else's is safe.
  RETURN_IF_ERROR(pool::Pool::Create(info.path, g).WithContext("rack pool " + info.path));

  auto rack = std::make_unique<RackPool>(info, cluster);  // from here on, errors remove it again
  const std::string bin = SelfBinary(options.dualpath_bin);
  const std::string logs = cluster.state_dir + "/log";
  std::error_code ec;
  std::filesystem::create_directories(logs, ec);
  // The manager on the first node; in the non-coherent model a standby on the second, which takes
  // the role over after one lease of silent heartbeat when the first dies.
  const size_t servers =
      model == pool::MemoryModel::kNonCoherent && cluster.nodes.size() > 1 ? 2 : 1;
  for (size_t i = 0; i < servers; ++i) {
    const testbed::Node& n = cluster.nodes[i];
    const std::vector<std::string> argv = {"ip",   "netns", "exec",    n.netns,  bin,
                                           "pool", "serve", info.path, "--node", std::to_string(i)};
    const std::string log_path = fmt::format("{}/rack-pool-serve-{}.log", logs, n.name);
    ASSIGN_OR_RETURN(Child c, Child::Spawn(argv, log_path, {}, options.daemons));
    rack->info_.servers.push_back({n.name, static_cast<uint32_t>(i), c.pid()});
    rack->servers_->children.push_back(std::move(c));
    if (i == 0) {
      // Ready when a probe gets the metadata lock (non-coherent: granted by a manager; the
      // probe never takes the role itself). Each try is bounded by the probe's lock timeout (3
      // leases); a loaded machine may start the server slower than that, so up to 10 tries
      // while it runs.
      Child& first = rack->servers_->children.back();
      Status ready = Status::Ok();
      for (int attempt = 0; attempt < 10 && !first.Poll().has_value(); ++attempt) {
        Result<std::unique_ptr<pool::Pool>> probe = Probe(info.path);
        ready = probe.ok() ? Status::Ok() : probe.status();
        if (ready.ok()) {
          const pool::PoolStats st = (*probe)->Stats();
          if (!st.lock_error.empty()) ready = Status(Code::kTimeout, st.lock_error);
        }
        if (ready.ok()) break;
      }
      if (!ready.ok() || !first.running()) {
        return Unavailable(
            fmt::format("rack pool {}: pool serve on {} is not serving ({}); log {}:\n{}",
                        info.path, n.name, ready.ToString(), log_path, first.LogTail(1000)));
      }
    }
  }
  if (options.daemons) {
    // The cluster's rack pool (cluster up): recorded for `status`, `run` and `down`. A run's own
    // is not, so a run that is killed leaves no description of a pool that is gone.
    RETURN_IF_ERROR(
        WriteOutputFile(RackPoolStatePath(cluster), InfoJson(rack->info_), "rack pool state"));
  }
  progress << "rack pool " << info.path << ": " << info.model << ", " << (info.bytes >> 20)
           << " MiB, lease " << info.lease_ms << " ms, lock manager on " << cluster.nodes[0].name
           << (servers > 1 ? " (standby on " + cluster.nodes[1].name + ")" : "") << "\n";
  return rack;
}

Result<std::optional<RackPoolInfo>> LoadRackPool(const testbed::Cluster& cluster) {
  const std::string path = RackPoolStatePath(cluster);
  std::ifstream in(path);
  if (!in) return std::optional<RackPoolInfo>();
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j["path"].is_string() || !j["model"].is_string()) {
    return Status(Code::kParseError, path + ": not a rack pool description");
  }
  RackPoolInfo info;
  info.path = j["path"].get<std::string>();
  info.model = j["model"].get<std::string>();
  info.bytes = j.value("bytes", uint64_t{0});
  info.lease_ms = j.value("lease_ms", uint64_t{0});
  if (j["servers"].is_array()) {
    for (const json& s : j["servers"]) {
      if (!s.is_object()) continue;
      info.servers.push_back(
          {s.value("node", std::string()), s.value("rack_node", 0u), s.value("pid", 0)});
    }
  }
  return std::optional<RackPoolInfo>(std::move(info));
}

Status RemoveRackPool(const testbed::Cluster& cluster, const RackPoolInfo& info) {
  std::error_code ec;
  Status result = Status::Ok();
  if (std::filesystem::exists(info.path, ec)) {
    result = pool::Pool::Destroy(info.path).WithContext("remove rack pool " + info.path);
  }
  std::filesystem::remove(RackPoolStatePath(cluster), ec);
  return result;
}

std::string DescribeRackPool(const RackPoolInfo& info) {
  std::string servers;
  for (const RackPoolInfo::Server& s : info.servers) {
    servers += fmt::format("{}{} (node {}, pid {})", servers.empty() ? "" : ", ", s.node,
                           s.rack_node, s.pid);
  }
  std::string state;
  Result<std::unique_ptr<pool::Pool>> p = Probe(info.path);
  if (!p.ok()) {
    state = "cannot attach: " + p.status().ToString();
  } else {
    const pool::PoolStats s = (*p)->Stats();
    if (!s.lock_error.empty()) {
      state = s.lock_error;
    } else {
      state = fmt::format("{} of {} MiB used, {} objects ({} pinned), {} processes",
                          s.used_bytes >> 20, (s.num_chunks * s.chunk_bytes) >> 20, s.ready_entries,
                          s.pinned_entries, s.live_procs);
      if (s.manager_epoch != 0) {
        state += fmt::format(", lock manager node {} pid {} (epoch {})", s.manager_node,
                             s.manager_pid, s.manager_epoch);
      }
    }
  }
  return fmt::format("rack pool {}: {}, {} MiB, lease {} ms, servers {}: {}", info.path, info.model,
                     info.bytes >> 20, info.lease_ms, servers.empty() ? "none" : servers, state);
}

}  // namespace dualpath::replay
