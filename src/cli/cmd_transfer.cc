// `dualpath bench transfer`: one-sided UCX transfer benchmark between two processes.
//
//   dualpath bench transfer --listen 127.0.0.1:5555 &
//   dualpath bench transfer --connect 127.0.0.1:5555 --size 65536 --batch 1 --op put --json
//
// The `bench` group is shared with other components' benchmarks: GetOrAddGroup (command.h) adds
// it only when no other cmd_*.cc registered it first.
#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "dualpath/benchlib/transfer_bench.h"
#include "dualpath/common/numeric.h"

namespace dualpath::cli {
namespace {

void Register(CLI::App& root, int* exit_code) {
  CLI::App* sub =
      GetOrAddGroup(root, "bench", "Benchmarks of the data paths")
          ->add_subcommand(
              "transfer", "One-sided UCX put/get between two processes; report Gbit/s and latency");
  auto o = std::make_shared<transfer::BenchOptions>();
  auto cls = std::make_shared<std::string>("low");
  auto op = std::make_shared<std::string>("put");
  auto json = std::make_shared<bool>(false);
  auto no_dscp = std::make_shared<bool>(false);
  auto timeout_ms = std::make_shared<int64_t>(5000);
  auto low_limit = std::make_shared<uint64_t>(64ull << 20);
  auto dscp_high = std::make_shared<int>(transfer::DefaultHighClass().dscp);
  auto dscp_low = std::make_shared<int>(transfer::DefaultLowClass().dscp);
  sub->add_option("--listen", o->listen, "Serve: ADDR:PORT to accept peers on");
  sub->add_option("--connect", o->connect, "Run the benchmark against a server at ADDR:PORT");
  sub->add_option("--size", o->size, "Bytes per descriptor (default 65536)");
  sub->add_option("--batch", o->batch, "Descriptors per batch, one completion each (default 1)");
  sub->add_option("--depth", o->depth, "Batches in flight (default 4)");
  sub->add_option("--iters", o->iters, "Measured batches (default: 1 GiB worth)");
  sub->add_option("--warmup", o->warmup, "Batches before measuring (default 2 x depth)");
  sub->add_option("--duration", o->duration_s, "Run for this many seconds instead of --iters");
  sub->add_option("--class", *cls, "Traffic class: high|low (default low)")
      ->check(CLI::IsMember({"high", "low"}));
  sub->add_option("--op", *op, "put|get (default put)")->check(CLI::IsMember({"put", "get"}));
  sub->add_option("--tls", o->engine.ucx_tls, "UCX_TLS for the engine (default: UCX's choice)");
  sub->add_option("--region-bytes", o->region_bytes, "Server: bytes to expose (default 256 MiB)");
  sub->add_option("--timeout-ms", *timeout_ms, "Peer timeout in ms (default 5000)");
  auto spin_us = std::make_shared<int64_t>(200);
  auto busy_poll = std::make_shared<bool>(false);
  sub->add_option("--spin-us", *spin_us,
                  "Progress thread keeps polling this long after the last event (default 200)");
  sub->add_flag("--busy-poll", *busy_poll,
                "Progress thread spins while operations are outstanding (default: sleeps on the "
                "workers' event fds)");
  sub->add_flag("--post-on-submit", o->engine.post_on_submit,
                "Submit posts to UCX itself when the progress thread is asleep (no hand-off; "
                "completions may run on the submitting thread)");
  sub->add_option("--low-inflight", *low_limit, "Low-class bytes in flight (0: unlimited)");
  sub->add_option("--dscp-high", *dscp_high, "DSCP of the high class (default 46, EF)");
  sub->add_option("--dscp-low", *dscp_low, "DSCP of the low class (default 8, CS1)");
  auto user_memory = std::make_shared<bool>(false);
  sub->add_flag("--user-memory", *user_memory,
                "Register mmap'd memory instead of UCX-allocated (shm peers cannot map it)");
  sub->add_flag("--same-buffer", o->same_buffer,
                "All descriptors use the same SIZE bytes on both sides (ucx_perftest's footprint)");
  sub->add_flag("--no-dscp", *no_dscp, "Leave sockets unmarked (both classes look alike)");
  sub->add_flag("--json", *json, "Print one JSON object");
  sub->callback([=] {
    o->ucx_alloc = !*user_memory;
    o->cls = *cls == "high" ? transfer::TrafficClass::kHigh : transfer::TrafficClass::kLow;
    o->op = *op == "put" ? transfer::Op::kPut : transfer::Op::kGet;
    o->engine.peer_timeout = *timeout_ms * kNanosPerMilli;
    o->engine.low_inflight_bytes = *low_limit;
    o->engine.idle_spin = std::max<int64_t>(0, *spin_us) * kNanosPerMicro;
    o->engine.busy_poll = *busy_poll;
    o->engine.classes[0].dscp = *no_dscp ? -1 : *dscp_high;
    o->engine.classes[1].dscp = *no_dscp ? -1 : *dscp_low;
    // docs/transfer.md "Input ranges" (the rest: ValidateBenchOptions).
    // Signed flags are checked as doubles (exact below 2^53), so a negative value is printed as
    // given.
    Status in_range = [&]() -> Status {
      RETURN_IF_ERROR(
          CheckRange("--timeout-ms", static_cast<double>(*timeout_ms), 1, 3'600'000, "ms"));
      RETURN_IF_ERROR(CheckRange("--spin-us", static_cast<double>(*spin_us), 0, 1'000'000, "us"));
      RETURN_IF_ERROR(CheckCountRange("--low-inflight", *low_limit, 0, 1ull << 40, "bytes"));
      RETURN_IF_ERROR(CheckRange("--dscp-high", *dscp_high, 0, 63, ""));
      return CheckRange("--dscp-low", *dscp_low, 0, 63, "");
    }();
    if (!in_range.ok()) {
      *exit_code = ReportError("bench transfer", in_range);
      return;
    }
    if (!o->listen.empty() && o->connect.empty()) {
      Status st = transfer::RunBenchServer(*o, [](const std::string& addr) {
        std::cout << "listening on " << addr << std::endl;  // flushed: scripts wait for it
      });
      *exit_code = st.ok() ? kExitOk : ReportError("bench transfer", st);
      return;
    }
    Result<transfer::BenchReport> r = transfer::RunBenchClient(*o);
    if (!r.ok()) {
      *exit_code = ReportError("bench transfer", r.status());
      return;
    }
    if (*json) {
      std::cout << r->ToJson() << "\n";
    } else {
      std::cout << "transfer " << r->op << " class=" << *cls << " size=" << r->size
                << " batch=" << r->batch << " depth=" << r->depth << ": " << r->gbps
                << " Gbit/s, batch p50 " << r->p50_us << " us, p99 " << r->p99_us << " us, "
                << r->descs_per_s << " descriptors/s, submit " << r->submit_ns_per_desc
                << " ns/desc, post " << r->post_ns_per_desc << " ns/desc\n";
    }
    *exit_code = kExitOk;
  });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
