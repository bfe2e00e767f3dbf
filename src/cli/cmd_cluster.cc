// `dualpath cluster ...`: the emulated multi-node cluster (testbed). See docs/testbed.md.
//
//   dualpath cluster up --pd 2P2D --stor-rate 400mbit --comp-rate 2gbit [--name N] [--dscp]
//       [--store [--store-dram-mib M]]
//       [--rack-pool coherent|noncoherent [--rack-pool-size S] [--rack-pool-path P]]
//   dualpath cluster status [--name N]
//   dualpath cluster exec [--name N] NODE -- CMD...
//   dualpath cluster get [--name N] KEY            (one value, for scripts)
//   dualpath cluster counters [--name N]           (link byte counters, for scripts)
//   dualpath cluster down [--name N]
//   dualpath cluster sink --port P | blast --to ADDR:PORT --seconds S [--dscp D]
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/number_flags.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/replay/cluster_store.h"
#include "dualpath/replay/rack_pool.h"
#include "dualpath/testbed/cluster.h"
#include "dualpath/testbed/link_stats.h"
#include "dualpath/testbed/netperf.h"
#include "dualpath/testbed/read_rate.h"
#include "dualpath/testbed/testbed.h"

namespace dualpath::cli {
namespace {

using testbed::Cluster;
using testbed::Link;
using testbed::Node;

bool IsMounted(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // Field 5 is the mount point (spaces are escaped as \040, which testbed paths never contain).
    size_t pos = 0;
    for (int field = 0; field < 4 && pos != std::string::npos; ++field) {
      pos = line.find(' ', pos);
      if (pos != std::string::npos) {
        ++pos;
      }
    }
    if (pos == std::string::npos) {
      continue;
    }
    if (line.compare(pos, line.find(' ', pos) - pos, path) == 0) {
      return true;
    }
  }
  return false;
}

void PrintDescription(const Cluster& c, std::ostream& out) {
  out << fmt::format(
      "cluster {}: {}, storage links {}, compute links {}, DSCP priority {}\n", c.name, c.PdSpec(),
      testbed::FormatRate(c.storage_rate_bps), testbed::FormatRate(c.compute_rate_bps),
      c.dscp_priority ? fmt::format("on (DSCP {} high, others low)", testbed::kDscpHigh) : "off");
  out << fmt::format("  {:<8} {:<8} {:<14} {:<16} {:<16} {}\n", "node", "role", "netns",
                     "storage addr", "compute addr", "mount");
  out << fmt::format("  {:<8} {:<8} {:<14} {:<16} {:<16} {}\n", "storage", "glusterd",
                     c.storage.netns, c.storage.address, "-",
                     c.storage.admin_mount + " (unshaped)");
  for (const Node& n : c.nodes) {
    out << fmt::format("  {:<8} {:<8} {:<14} {:<16} {:<16} {}\n", n.name, testbed::RoleName(n.role),
                       n.netns, n.storage_addr + " " + n.storage_if,
                       n.compute_addr + " " + n.compute_if, n.mount);
  }
  out << fmt::format("description: {}/cluster.json\n", c.state_dir);
}

void AddNameOption(CLI::App* sub, std::string* name) {
  sub->add_option("--name", *name, "Cluster name (default dp)");
}

// `get` keys: what a shell script needs without a JSON parser.
Result<std::string> GetKey(const Cluster& c, const std::string& key) {
  if (key == "name") return c.name;
  if (key == "state_dir") return c.state_dir;
  if (key == "pd") return c.PdSpec();
  if (key == "stor_rate_bps") return std::to_string(c.storage_rate_bps);
  if (key == "comp_rate_bps") return std::to_string(c.compute_rate_bps);
  if (key == "nodes" || key == "prefill_nodes" || key == "decode_nodes") {
    std::string out;
    for (const Node& n : c.nodes) {
      if (key == "nodes" || (key == "prefill_nodes") == (n.role == testbed::Role::kPrefill)) {
        out += (out.empty() ? "" : " ") + n.name;
      }
    }
    return out;
  }
  const size_t dot = key.find('.');
  if (dot != std::string::npos) {
    const std::string obj = key.substr(0, dot);
    const std::string field = key.substr(dot + 1);
    if (obj == "storage") {
      if (field == "netns") return c.storage.netns;
      if (field == "address") return c.storage.address;
      if (field == "volume") return c.storage.volume;
      if (field == "brick") return c.storage.brick;
      if (field == "admin_mount") return c.storage.admin_mount;
    } else if (obj == "switch" && field == "netns") {
      return c.compute.netns;
    } else if (const Node* n = c.FindNode(obj); n != nullptr) {
      if (field == "role") return std::string(testbed::RoleName(n->role));
      if (field == "netns") return n->netns;
      if (field == "storage_addr") return n->storage_addr;
      if (field == "compute_addr") return n->compute_addr;
      if (field == "storage_if") return n->storage_if;
      if (field == "compute_if") return n->compute_if;
      if (field == "mount") return n->mount;
    }
  }
  return InvalidArgument(fmt::format(
      "unknown key '{}'; keys: name state_dir pd stor_rate_bps comp_rate_bps nodes prefill_nodes "
      "decode_nodes storage.{{netns,address,volume,brick,admin_mount}} switch.netns "
      "<node>.{{role,netns,storage_addr,compute_addr,storage_if,compute_if,mount}}",
      key));
}

void RegisterUpDown(CLI::App* cluster, int* exit_code) {
  auto up_opts = std::make_shared<testbed::ClusterOptions>();
  auto pd = std::make_shared<std::string>("1P1D");
  auto stor_rate = std::make_shared<std::string>("400mbit");
  auto comp_rate = std::make_shared<std::string>("2gbit");
  CLI::App* up = cluster->add_subcommand("up", "Create a cluster (needs root)");
  up->add_option("--pd", *pd, "Prefill and decode nodes, e.g. 1P1D, 2P4D (default 1P1D)");
  up->add_option("--stor-rate", *stor_rate, "Rate of each storage link (default 400mbit)");
  up->add_option("--comp-rate", *comp_rate, "Rate of each compute link (default 2gbit)");
  AddNameOption(up, &up_opts->name);
  up->add_flag("--dscp", up_opts->dscp_priority,
               "DSCP priority on compute links: DSCP 46 (EF) high, all else low");
  auto store = std::make_shared<bool>(false);
  auto store_dram_mib = std::make_shared<uint64_t>(256);
  CLI::Option* store_flag = up->add_flag(
      "--store", *store,
      "Also start the distributed KV store: etcd, two masters and a store node per node, "
      "left running until `cluster down` (docs/store.md \"In the system\")");
  up->add_option("--store-dram-mib", *store_dram_mib,
                 "DRAM tier of each store node, MiB (default 256; with --store)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->needs(store_flag);
  auto rack = std::make_shared<replay::RackPoolOptions>();
  auto rack_size = std::make_shared<std::string>("1G");
  CLI::Option* rack_flag = up->add_option(
      "--rack-pool", rack->model,
      "Also make the rack pool, coherent or noncoherent: one pool region every node maps (the "
      "KV substrate of `cluster run --kv-substrate rack-pool`), its lock manager `pool serve` on "
      "the first node (and, noncoherent, a standby on the second), removed by `cluster down` "
      "(docs/testbed.md \"Rack pool\")");
  up->add_option("--rack-pool-size", *rack_size, "Data size of the rack pool (default 1G)")
      ->needs(rack_flag);
  up->add_option("--rack-pool-path", rack->path,
                 "Where the rack pool lives: a file every node namespace sees (default "
                 "/dev/shm/NAME-rack.pool), a hugetlbfs file or a DAX device")
      ->needs(rack_flag);
  up->callback([=] {
    testbed::ClusterOptions o = *up_opts;
    Status s = [&]() -> Status {
      replay::RackPoolOptions ro = *rack;
      ro.daemons = true;
      if (rack_flag->count() > 0) {
        // Checked before anything is built (the model, the size; StartRackPool checks again).
        if (ro.model != "coherent" && ro.model != "noncoherent") {
          return InvalidArgument("--rack-pool '" + ro.model +
                                 "': expected coherent or noncoherent");
        }
        ASSIGN_OR_RETURN(ro.bytes, ParseSize("--rack-pool-size", *rack_size));
        RETURN_IF_ERROR(CheckCountRange("--rack-pool-size", ro.bytes, replay::kMinRackPoolBytes,
                                        replay::kMaxRackPoolBytes, "bytes"));
      }
      ASSIGN_OR_RETURN(auto counts, testbed::ParsePdSpec(*pd));
      o.prefill_nodes = counts.first;
      o.decode_nodes = counts.second;
      ASSIGN_OR_RETURN(o.storage_rate_bps, testbed::ParseRate(*stor_rate));
      ASSIGN_OR_RETURN(o.compute_rate_bps, testbed::ParseRate(*comp_rate));
      // SIGINT / SIGTERM while the script builds the cluster: it finishes (a half-built cluster
      // is what a kill would leave), then the cluster is taken down again and we exit 130 / 143.
      InstallStopHandlers();
      testbed::UpReport report;
      ASSIGN_OR_RETURN(Cluster c, testbed::ClusterUp(o, &report));
      if (Status stop = CheckStop(); !stop.ok()) {
        Status down = testbed::ClusterDown(c.name);
        return stop.WithContext(down.ok() ? "cluster " + c.name + " taken down again"
                                          : "taking cluster " + c.name +
                                                " down again failed: " + down.ToString());
      }
      PrintDescription(c, std::cout);
      std::cout << fmt::format("up in {:.2f} s\n", report.seconds);
      if (rack_flag->count() > 0) {
        Result<std::unique_ptr<replay::RackPool>> rp = replay::StartRackPool(c, ro, std::cout);
        if (!rp.ok()) {
          Status down = testbed::ClusterDown(c.name);
          return rp.status().WithContext(down.ok() ? "cluster " + c.name + " taken down again"
                                                   : "taking cluster " + c.name +
                                                         " down again failed: " + down.ToString());
        }
        (*rp)->Detach();  // the servers live in the cluster's namespaces: `cluster down` stops them
      }
      if (*store) {
        replay::ClusterStoreOptions so;
        so.dram_mib = *store_dram_mib;
        Result<replay::ClusterStoreInfo> info = replay::StartClusterStore(c, so, std::cout);
        if (!info.ok()) {
          Status down = testbed::ClusterDown(c.name);
          return info.status().WithContext(
              down.ok() ? "cluster " + c.name + " taken down again"
                        : "taking cluster " + c.name + " down again failed: " + down.ToString());
        }
        // What a user of the store needs (docs/store.md "Security"): its client certificate
        // towards etcd and the masters, and the nodes' transfer token.
        const std::string tls = fmt::format(
            "--tls-cert {0}/client.crt --tls-key {0}/client.key "
            "--tls-ca {0}/ca.crt",
            info->auth_dir);
        std::cout << fmt::format(
            "store {}: etcd {}, mutual TLS and a transfer token (credentials in {}); e.g. "
            "dualpath cluster exec {} -- dualpath store stats --cluster {} --etcd {} {}; "
            "store bench also takes --transfer-token-file {}/transfer.token --ucx-net-devices "
            "comp0\n",
            info->cluster, info->etcd, info->auth_dir, c.nodes[0].name, info->cluster, info->etcd,
            tls, info->auth_dir);
      }
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster up", s);
  });

  auto down_name = std::make_shared<std::string>(testbed::kDefaultClusterName);
  CLI::App* down = cluster->add_subcommand(
      "down", "Stop and remove a cluster: processes, mounts, namespaces, state (idempotent)");
  AddNameOption(down, down_name.get());
  down->callback([=] {
    // The rack pool's description lives in the state directory, which the tear-down removes:
    // remove the region first (Pool::Destroy: the file and its node lock files; its servers,
    // which still map it, are stopped with the cluster's other processes just after).
    Status rack = Status::Ok();
    if (Result<Cluster> c = testbed::LoadCluster(*down_name); c.ok()) {
      Result<std::optional<replay::RackPoolInfo>> r = replay::LoadRackPool(*c);
      if (r.ok() && r->has_value()) rack = replay::RemoveRackPool(*c, **r);
    }
    Status s = testbed::ClusterDown(*down_name);
    if (s.ok()) s = rack;
    *exit_code = s.ok() ? kExitOk : ReportError("cluster down", s);
  });
}

void RegisterInspect(CLI::App* cluster, int* exit_code) {
  auto name = std::make_shared<std::string>(testbed::kDefaultClusterName);

  CLI::App* status = cluster->add_subcommand(
      "status", "Show nodes, addresses, rates, mounts and every link's byte counters");
  AddNameOption(status, name.get());
  status->callback([=] {
    Status s = [&]() -> Status {
      ASSIGN_OR_RETURN(Cluster c, testbed::LoadCluster(*name));
      PrintDescription(c, std::cout);
      ASSIGN_OR_RETURN(std::optional<replay::RackPoolInfo> rack, replay::LoadRackPool(c));
      if (rack) std::cout << "  " << replay::DescribeRackPool(*rack) << "\n";
      std::cout << fmt::format("  {:<8} {:<9} {:>15} {:>15}   {}\n", "node", "link", "rx bytes",
                               "tx bytes", "mount");
      for (const Node& n : c.nodes) {
        for (Link l : {Link::kStorage, Link::kCompute}) {
          Result<testbed::LinkCounters> k = testbed::ReadNodeLink(n, l);
          const bool stor = l == Link::kStorage;
          std::cout << fmt::format("  {:<8} {:<9} {:>15} {:>15}   {}\n", n.name,
                                   stor ? "storage" : "compute",
                                   k.ok() ? std::to_string(k->rx_bytes) : "?",
                                   k.ok() ? std::to_string(k->tx_bytes) : "?",
                                   stor ? (IsMounted(n.mount) ? "mounted" : "NOT MOUNTED") : "");
        }
      }
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster status", s);
  });

  CLI::App* counters = cluster->add_subcommand(
      "counters", "Print 'NODE LINK RX_BYTES TX_BYTES' for every node's storage and compute link");
  AddNameOption(counters, name.get());
  counters->callback([=] {
    Status s = [&]() -> Status {
      ASSIGN_OR_RETURN(Cluster c, testbed::LoadCluster(*name));
      for (const Node& n : c.nodes) {
        for (Link l : {Link::kStorage, Link::kCompute}) {
          ASSIGN_OR_RETURN(testbed::LinkCounters k, testbed::ReadNodeLink(n, l));
          std::cout << fmt::format("{} {} {} {}\n", n.name,
                                   l == Link::kStorage ? "storage" : "compute", k.rx_bytes,
                                   k.tx_bytes);
        }
      }
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster counters", s);
  });

  auto key = std::make_shared<std::string>();
  CLI::App* get = cluster->add_subcommand("get", "Print one value of the description");
  AddNameOption(get, name.get());
  get->add_option("key", *key, "e.g. nodes, p0.mount, d1.compute_addr, storage.admin_mount")
      ->required();
  get->callback([=] {
    Status s = [&]() -> Status {
      ASSIGN_OR_RETURN(Cluster c, testbed::LoadCluster(*name));
      ASSIGN_OR_RETURN(std::string v, GetKey(c, *key));
      std::cout << v << "\n";
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster get", s);
  });

  auto node = std::make_shared<std::string>();
  auto command = std::make_shared<std::vector<std::string>>();
  CLI::App* exec = cluster->add_subcommand(
      "exec", "Run a command in a node's network namespace: exec NODE -- CMD...");
  AddNameOption(exec, name.get());
  exec->add_option("node", *node, "Node name (p0, d1, ...), 'storage' or 'switch'")->required();
  exec->add_option("command", *command, "Command and arguments (after --)")->required();
  exec->callback([=] {
    Status s = [&]() -> Status {
      RETURN_IF_ERROR(testbed::RequireRoot("dualpath cluster exec"));
      ASSIGN_OR_RETURN(Cluster c, testbed::LoadCluster(*name));
      std::string netns;
      if (*node == "storage") {
        netns = c.storage.netns;
      } else if (*node == "switch") {
        netns = c.compute.netns;
      } else if (const Node* n = c.FindNode(*node); n != nullptr) {
        netns = n->netns;
      } else {
        return InvalidArgument(fmt::format("no node '{}' in cluster {} (nodes: {})", *node, c.name,
                                           GetKey(c, "nodes").value()));
      }
      std::vector<std::string> argv = {"ip", "netns", "exec", netns};
      argv.insert(argv.end(), command->begin(), command->end());
      std::vector<char*> args;
      for (std::string& a : argv) {
        args.push_back(a.data());
      }
      args.push_back(nullptr);
      std::cout.flush();
      execvp(args[0], args.data());
      return IoError("exec ip netns exec", errno);
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster exec", s);
  });
}

void RegisterNetperf(CLI::App* cluster, int* exit_code) {
  struct SinkArgs {
    std::string bind = "0.0.0.0";
    uint16_t port = 0;
    int connections = 1;
  };
  auto sa = std::make_shared<SinkArgs>();
  CLI::App* sink = cluster->add_subcommand(
      "sink", "Accept TCP connections and discard what arrives (use with cluster exec)");
  sink->add_option("--bind", sa->bind, "IPv4 address to listen on (default 0.0.0.0)");
  sink->add_option("--port", sa->port, "TCP port")->required();
  sink->add_option("--connections", sa->connections, "Exit after this many (default 1)")
      ->check(CLI::PositiveNumber);
  sink->callback([=] {
    Status s = [&]() -> Status {
      ASSIGN_OR_RETURN(testbed::Sink sk, testbed::Sink::Listen(sa->bind, sa->port));
      for (int i = 0; i < sa->connections; ++i) {
        ASSIGN_OR_RETURN(uint64_t bytes, sk.AcceptAndDrain());
        std::cout << fmt::format("received {} bytes\n", bytes) << std::flush;
      }
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster sink", s);
  });

  struct BlastArgs {
    std::string to;
    double seconds = 0;
    uint64_t bytes = 0;
    int dscp = -1;
  };
  auto ba = std::make_shared<BlastArgs>();
  CLI::App* blast = cluster->add_subcommand(
      "blast", "Send TCP data as fast as the link allows (use with cluster exec)");
  blast->add_option("--to", ba->to, "ADDR:PORT of a sink")->required();
  blast->add_option("--seconds", ba->seconds, "Send for this long")->check(CLI::PositiveNumber);
  blast->add_option("--bytes", ba->bytes, "Send this many bytes");
  blast->add_option("--dscp", ba->dscp, "Mark packets with this DSCP (0..63), e.g. 46 or 10")
      ->check(CLI::Range(0, 63));
  blast->callback([=] {
    Status s = [&]() -> Status {
      const size_t colon = ba->to.rfind(':');
      int port = 0;
      if (colon == std::string::npos || std::sscanf(ba->to.c_str() + colon + 1, "%d", &port) != 1 ||
          port <= 0 || port > 65535) {
        return InvalidArgument(fmt::format("--to '{}': expected ADDR:PORT", ba->to));
      }
      // docs/testbed.md "Input ranges".
      RETURN_IF_ERROR(CheckRange("--seconds", ba->seconds, 0, 86'400, "s"));
      RETURN_IF_ERROR(CheckCountRange("--bytes", ba->bytes, 0, 1ull << 50, "bytes"));
      testbed::BlastOptions o;
      o.host = ba->to.substr(0, colon);
      o.port = static_cast<uint16_t>(port);
      o.duration = FromSeconds(ba->seconds);
      o.max_bytes = ba->bytes;
      o.dscp = ba->dscp;
      if (o.duration <= 0 && o.max_bytes == 0) {
        return InvalidArgument("blast: give --seconds or --bytes");
      }
      ASSIGN_OR_RETURN(testbed::BlastResult r, testbed::Blast(o, SteadyClock::Default()));
      const double secs = ToSeconds(r.elapsed);
      std::cout << fmt::format("sent {} bytes in {:.3f} s = {:.1f} Mbit/s\n", r.bytes, secs,
                               secs > 0 ? static_cast<double>(r.bytes) * 8 / secs / 1e6 : 0.0);
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster blast", s);
  });
}

void RegisterRead(CLI::App* cluster, int* exit_code) {
  struct ReadArgs {
    std::string file;
    std::string link = std::string(testbed::kStorageIf);
    size_t block = 4 * 1024 * 1024;
    int streams = 4;
  };
  auto ra = std::make_shared<ReadArgs>();
  CLI::App* read = cluster->add_subcommand(
      "read",
      "Read a file with O_DIRECT and report the rate seen on a link's rx counter (run it in a "
      "node: cluster exec NODE -- dualpath cluster read FILE)");
  read->add_option("file", ra->file, "File to read")->required();
  read->add_option("--link", ra->link, "Interface whose rx_bytes to sample (default stor0)");
  read->add_option("--block-size", ra->block, "Bytes per read, multiple of 4096 (default 4 MiB)");
  read->add_option("--streams", ra->streams,
                   "Concurrent readers over contiguous parts of the file (default 4)")
      ->check(CLI::Range(1, 64));
  read->callback([=] {
    Status s = [&]() -> Status {
      RETURN_IF_ERROR(CheckCountRange("--block-size", ra->block, 4096, 1ull << 30, "bytes"));
      testbed::ReadRateOptions o{
          .path = ra->file,
          .block_bytes = ra->block,
          .rx_counter = fmt::format("/sys/class/net/{}/statistics/rx_bytes", ra->link),
          .streams = ra->streams};
      ASSIGN_OR_RETURN(testbed::ReadRateResult r, testbed::MeasureRead(o, SteadyClock::Default()));
      // key=value, one line: read by scripts (tests/testbed, scripts/testbed/bench.sh).
      std::cout << fmt::format(
          "file_bytes={} seconds={:.4f} link_bytes={} file_mbps={:.1f} link_mbps={:.1f} "
          "steady_link_mbps={:.1f} steady_seconds={:.4f}\n",
          r.file_bytes, ToSeconds(r.elapsed), r.link_bytes, r.file_bps / 1e6, r.link_bps / 1e6,
          r.steady_link_bps / 1e6, ToSeconds(r.steady_window));
      return Status::Ok();
    }();
    *exit_code = s.ok() ? kExitOk : ReportError("cluster read", s);
  });
}

void Register(CLI::App& root, int* exit_code) {
  // Shared group: cmd_cluster_run.cc adds `run` to it, whichever registers first.
  CLI::App* cluster =
      GetOrAddGroup(root, "cluster",
                    "Emulated multi-node cluster: namespaces, shaped links, GlusterFS (testbed)");
  RegisterUpDown(cluster, exit_code);
  RegisterInspect(cluster, exit_code);
  RegisterNetperf(cluster, exit_code);
  RegisterRead(cluster, exit_code);
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
