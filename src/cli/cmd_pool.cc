// `dualpath pool create|stat|destroy|serve` and `dualpath bench pool`.
//
//   dualpath pool create /dev/shm/kvpool --size 8G [--chunk 4M] [--model noncoherent]
//   dualpath pool stat /dev/shm/kvpool [--json]
//   dualpath pool destroy /dev/shm/kvpool
//   dualpath pool serve /dev/shm/kvpool [--node N]    # hold / stand by for the lock-manager role
//   dualpath bench pool [--json] [--dir /dev/shm] [--mib 64] [--passes 5]

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/number_flags.h"
#include "dualpath/benchlib/pool_bench.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/pool/pool.h"

namespace dualpath::cli {
namespace {

// Pool errors that mean the user pointed at the wrong thing are bad input (exit 2).
int Report(std::string_view what, const Status& s) {
  switch (s.code()) {
    case Code::kPoolBadMagic:
    case Code::kPoolBadVersion:
    case Code::kPoolTooSmall:
    case Code::kCorruption:
    case Code::kNotFound:
    case Code::kAlreadyExists:
      std::cerr << "dualpath " << what << ": " << s.ToString() << "\n";
      return kExitBadInput;
    default:
      return ReportError(what, s);
  }
}

void PrintStats(const std::string& path, const pool::PoolStats& s, bool json) {
  if (json) {
    std::printf(
        "{\"path\":\"%s\",\"model\":\"%s\",\"region_bytes\":%lu,\"chunk_bytes\":%lu,"
        "\"num_chunks\":%lu,\"free_chunks\":%lu,\"index_capacity\":%lu,\"ready_entries\":%lu,"
        "\"writing_entries\":%lu,\"pinned_entries\":%lu,\"total_pins\":%lu,\"used_bytes\":%lu,"
        "\"live_procs\":%lu,\"roots\":%lu,\"evictions\":%lu,\"sweeps\":%lu,"
        "\"reclaimed_procs\":%lu,\"reclaimed_roots\":%lu,\"manager_epoch\":%lu,"
        "\"manager_node\":%u,\"manager_pid\":%d}\n",
        path.c_str(), std::string(pool::MemoryModelName(s.model)).c_str(), s.region_bytes,
        s.chunk_bytes, s.num_chunks, s.free_chunks, s.index_capacity, s.ready_entries,
        s.writing_entries, s.pinned_entries, s.total_pins, s.used_bytes, s.live_procs - 1, s.roots,
        s.evictions, s.sweeps, s.reclaimed_procs, s.reclaimed_roots, s.manager_epoch,
        s.manager_node, s.manager_pid);
    return;
  }
  std::printf("region        %s\n", path.c_str());
  std::printf("model         %s\n", std::string(pool::MemoryModelName(s.model)).c_str());
  std::printf("size          %lu bytes, %lu chunks of %lu bytes, %lu free\n", s.region_bytes,
              s.num_chunks, s.chunk_bytes, s.free_chunks);
  std::printf("index         %lu entries: %lu ready, %lu being written, %lu pinned (%lu pins)\n",
              s.index_capacity, s.ready_entries, s.writing_entries, s.pinned_entries, s.total_pins);
  std::printf("used          %lu bytes in blocks and roots, %lu roots\n", s.used_bytes, s.roots);
  for (const pool::RootInfo& r : s.root_list) {
    if (r.lifetime == pool::RootLifetime::kProcess) {
      std::printf("  root %-24s %lu bytes, owned by pid %d\n", r.name.c_str(), r.bytes,
                  r.owner_pid);
    } else {
      std::printf("  root %-24s %lu bytes, persistent\n", r.name.c_str(), r.bytes);
    }
  }
  // This command is itself attached while it reads the stats: do not count it.
  std::printf("processes     %lu attached (besides this one)\n", s.live_procs - 1);
  for (const pool::ProcInfo& p : s.procs) {
    if (p.pid == getpid()) continue;
    std::printf("  pid %-8d node %-3u pins %-6lu writing %lu\n", p.pid, p.node, p.pins, p.writing);
  }
  std::printf(
      "history       %lu evictions, %lu recovery sweeps, %lu dead processes and %lu owner-bound "
      "roots reclaimed\n",
      s.evictions, s.sweeps, s.reclaimed_procs, s.reclaimed_roots);
  if (s.model == pool::MemoryModel::kNonCoherent) {
    // Epoch 1 is the first manager; a higher one means the role failed over (docs/pool.md).
    std::printf("lock manager  epoch %lu, node %u, pid %d\n", s.manager_epoch, s.manager_node,
                s.manager_pid);
  }
}

void RegisterPool(CLI::App& root, int* exit_code) {
  CLI::App* group = root.add_subcommand("pool", "Shared-memory KV pool regions");
  group->require_subcommand(1);

  struct CreateArgs {
    std::string path, size, chunk = "4M", model = "coherent";
    uint32_t nodes = 8, max_procs = 64;
    uint64_t lease_ms = 5000;
  };
  auto ca = std::make_shared<CreateArgs>();
  CLI::App* create = group->add_subcommand("create", "Create and format a pool region");
  create->add_option("path", ca->path, "Region file (/dev/shm/..., hugetlbfs) or DAX device")
      ->required();
  create->add_option("--size", ca->size, "Region size, e.g. 8G")->required();
  create->add_option("--chunk", ca->chunk, "Chunk size, a power of two (default 4M)");
  create->add_option("--model", ca->model, "coherent | noncoherent (default coherent)");
  create->add_option("--nodes", ca->nodes, "Nodes that may attach (non-coherent model)");
  create->add_option("--max-procs", ca->max_procs, "Processes attached at once (default 64)");
  create->add_option("--lease-ms", ca->lease_ms, "Lease on liveness, pins, lock grants");
  create->callback([ca, exit_code] {
    pool::Geometry g;
    Result<uint64_t> size = ParseSize("--size", ca->size);
    Result<uint64_t> chunk = ParseSize("--chunk", ca->chunk);
    Result<pool::MemoryModel> model = pool::ParseMemoryModel(ca->model);
    for (const Status& s : {size.status(), chunk.status(), model.status()}) {
      if (!s.ok()) {
        *exit_code = Report("pool create", s);
        return;
      }
    }
    constexpr uint64_t kMaxLeaseMs = 86'400'000;  // a day: a longer lease is a mistake
    if (Status st = CheckCountRange("--lease-ms", ca->lease_ms, 1, kMaxLeaseMs, "ms"); !st.ok()) {
      *exit_code = Report("pool create", st);
      return;
    }
    g.region_bytes = *size;
    g.chunk_bytes = *chunk;
    g.model = *model;
    g.num_nodes = ca->nodes;
    g.max_procs = ca->max_procs;
    g.lease = static_cast<Nanos>(ca->lease_ms) * kNanosPerMilli;
    Status s = pool::Pool::Create(ca->path, g);
    if (s.code() == Code::kStorageNoSpace) {
      // A size the file system cannot hold is bad input: the user asked for more than there is.
      std::cerr << "dualpath pool create: --size " << ca->size << ": " << s.ToString() << "\n";
      *exit_code = kExitBadInput;
      return;
    }
    if (!s.ok()) {
      *exit_code = Report("pool create", s);
      return;
    }
    Result<pool::Geometry> made = pool::Pool::ReadGeometry(ca->path);
    std::printf("created %s: %s, %lu bytes, chunk %lu, index %lu entries\n", ca->path.c_str(),
                std::string(pool::MemoryModelName(g.model)).c_str(), g.region_bytes, g.chunk_bytes,
                made.ok() ? made->index_capacity : 0);
    *exit_code = kExitOk;
  });

  struct StatArgs {
    std::string path;
    bool json = false;
    uint32_t node = 0;
  };
  auto sa = std::make_shared<StatArgs>();
  CLI::App* stat = group->add_subcommand("stat", "Show a region's geometry and occupancy");
  stat->add_option("path", sa->path, "Region path")->required();
  stat->add_flag("--json", sa->json, "One JSON object on stdout");
  stat->add_option("--node", sa->node, "This host's node id (non-coherent model)");
  stat->callback([sa, exit_code] {
    pool::OpenOptions o;
    o.node = sa->node;
    o.background_thread = false;
    Result<std::unique_ptr<pool::Pool>> p = pool::Pool::Open(sa->path, o);
    if (!p.ok()) {
      *exit_code = Report("pool stat", p.status());
      return;
    }
    const pool::PoolStats st = (*p)->Stats();
    if (!st.lock_error.empty()) {
      // Attached, then the lock stayed out of reach for the lock timeout: no counts to show.
      std::cerr << "dualpath pool stat: " << st.lock_error << "\n";
      *exit_code = kExitFailure;
      return;
    }
    PrintStats(sa->path, st, sa->json);
    *exit_code = kExitOk;
  });

  // A process attached only to hold (or stand by for) the lock-manager role of a non-coherent
  // region: what a cluster runs as the region's supervised manager. It serves until SIGTERM or
  // SIGINT, then detaches, resigning the role so another node's process takes it at once.
  struct ServeArgs {
    std::string path;
    uint32_t node = 0;
  };
  auto va = std::make_shared<ServeArgs>();
  CLI::App* serve =
      group->add_subcommand("serve", "Attach and serve the lock-manager role until SIGTERM/SIGINT");
  serve->add_option("path", va->path, "Region path")->required();
  serve->add_option("--node", va->node, "This host's node id (non-coherent model)");
  serve->callback([va, exit_code] {
    Result<pool::Geometry> g = pool::Pool::ReadGeometry(va->path);
    if (!g.ok()) {
      *exit_code = Report("pool serve", g.status());
      return;
    }
    if (va->node >= g->num_nodes) {
      std::cerr << "dualpath pool serve: --node " << va->node << ": the region has " << g->num_nodes
                << " node(s), ids 0.." << g->num_nodes - 1 << "\n";
      *exit_code = kExitBadInput;
      return;
    }
    // Blocked before the pool's threads start, so that they inherit the mask and sigwait below
    // is the only taker.
    const StopSignalWaiter signals;
    pool::OpenOptions o;
    o.node = va->node;
    Result<std::unique_ptr<pool::Pool>> p = pool::Pool::Open(va->path, o);
    if (!p.ok()) {
      *exit_code = Report("pool serve", p.status());
      return;
    }
    std::printf("serving %s as node %u (pid %d)\n", va->path.c_str(), va->node, getpid());
    std::fflush(stdout);
    const int sig = signals.Wait();
    p->reset();  // detach: resigns the manager role if held
    std::cerr << "dualpath pool serve: stopped by " << StopSignalName(sig) << "\n";
    *exit_code = StopExitCode(sig);
  });

  auto dpath = std::make_shared<std::string>();
  CLI::App* destroy = group->add_subcommand("destroy", "Remove a pool region (checks it is one)");
  destroy->add_option("path", *dpath, "Region path")->required();
  destroy->callback([dpath, exit_code] {
    Status s = pool::Pool::Destroy(*dpath);
    *exit_code = s.ok() ? kExitOk : Report("pool destroy", s);
    if (s.ok()) std::printf("destroyed %s\n", dpath->c_str());
  });
}

void RegisterBench(CLI::App& root, int* exit_code) {
  // `bench` is shared with other components (storage, transfer): take it if it exists.
  CLI::App* bench = GetOrAddGroup(root, "bench", "Microbenchmarks");
  struct Args {
    bool json = false;
    pool::BenchOptions o;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = bench->add_subcommand(
      "pool", "Pool put/get bandwidth vs memcpy, pin latency, lookups/s, both memory models");
  sub->add_flag("--json", a->json, "Write {\"results\":[...]} to stdout");
  sub->add_option("--dir", a->o.dir, "Directory for the temporary regions (default /dev/shm)");
  sub->add_option("--mib", a->o.data_mib, "Payload MiB per pass (default 64)");
  sub->add_option("--passes", a->o.passes, "Timed passes per figure, medians reported (default 7)");
  auto model = std::make_shared<std::string>("both");
  sub->add_option("--model", *model, "coherent | noncoherent | both (default both)");
  sub->callback([a, model, exit_code] {
    if (*model != "both") {
      Result<pool::MemoryModel> m = pool::ParseMemoryModel(*model);
      if (!m.ok()) {
        *exit_code = Report("bench pool", m.status());
        return;
      }
      a->o.models = {*m};
    }
    Result<std::vector<pool::BenchRow>> rows = pool::RunPoolBench(a->o);
    if (rows.status().code() == Code::kStorageNoSpace) {
      // The regions are sized by --mib: more than --dir can hold is bad input.
      std::cerr << "dualpath bench pool: --mib " << a->o.data_mib << " in --dir " << a->o.dir
                << ": " << rows.status().ToString() << "\n";
      *exit_code = kExitBadInput;
      return;
    }
    if (!rows.ok()) {
      *exit_code = Report("bench pool", rows.status());
      return;
    }
    if (a->json) {
      std::printf("%s\n", pool::BenchJson(*rows).c_str());
    } else {
      std::printf("%-12s %10s %12s %10s %10s %9s %9s %12s\n", "mode", "block", "memcpy GB/s",
                  "put GB/s", "get GB/s", "get/memcpy", "pin ns", "lookup Mops");
      for (const pool::BenchRow& r : *rows) {
        std::printf("%-12s %10lu %12.2f %10.2f %10.2f %9.2f %9.0f %12.2f\n",
                    std::string(pool::MemoryModelName(r.model)).c_str(), r.block_bytes,
                    r.memcpy_gbps, r.put_gbps, r.get_gbps, r.get_over_memcpy, r.pin_ns,
                    r.lookup_mops);
      }
    }
    *exit_code = kExitOk;
  });
}

DUALPATH_CLI_COMMAND(RegisterPool);
DUALPATH_CLI_COMMAND(RegisterBench);

}  // namespace
}  // namespace dualpath::cli
