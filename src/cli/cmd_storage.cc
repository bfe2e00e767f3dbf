// `dualpath bench storage`: write then read a set of block files through the storage tier
// (io_uring, O_DIRECT, verified reads) and report GB/s. See docs/storage.md.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "dualpath/benchlib/storage_bench.h"
#include "dualpath/common/stop_signal.h"

namespace dualpath::cli {
namespace {

void Register(CLI::App& root, int* exit_code) {
  CLI::App* bench = GetOrAddGroup(root, "bench", "Benchmarks of the data paths");
  CLI::App* sub = bench->add_subcommand(
      "storage", "Write then read block files through the storage tier; report GB/s");
  auto o = std::make_shared<storage::StorageBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto sync = std::make_shared<std::string>("data");
  auto io = std::make_shared<std::string>("auto");
  sub->add_option("--dir", o->dir, "Directory to write the block files under (created)")
      ->required();
  sub->add_option("--block-bytes", o->block_bytes,
                  "Block file size in bytes, header included (multiple of 4096; default 1 MiB)");
  sub->add_option("--queue-depth", o->queue_depth, "io_uring operations in flight (default 32)");
  sub->add_option("--files", o->files, "Number of block files (default 1024)");
  sub->add_option("--verify-threads", o->verify_threads,
                  "Threads verifying checksums off the I/O thread (default 1; 0 = inline)");
  sub->add_option("--sync", *sync, "none|data|full: fdatasync before publish (default data)")
      ->check(CLI::IsMember({"none", "data", "full"}));
  sub->add_option("--io", *io, "auto|direct|buffered (default auto: O_DIRECT if accepted)")
      ->check(CLI::IsMember({"auto", "direct", "buffered"}));
  sub->add_flag("--keep", o->keep, "Keep the files (to read the same set with fio)");
  sub->add_flag("--json", *json, "Print one JSON object");
  auto fingerprint = std::make_shared<std::string>();
  sub->add_option("--fingerprint", *fingerprint,
                  "Model directory to use, 16 hex digits (default: a fresh random one)");
  sub->add_flag("--read-only", o->read_only,
                "Only read (and verify) the set an earlier --keep run left (needs --fingerprint)");
  auto verbose_json = std::make_shared<bool>(false);
  sub->add_flag("--json-details", *verbose_json,
                "With --json: add fingerprint, model_dir, seconds, read CPU seconds, direct_io");
  sub->callback([=] {
    static const std::map<std::string, storage::SyncMode> kSync = {
        {"none", storage::SyncMode::kNone},
        {"data", storage::SyncMode::kData},
        {"full", storage::SyncMode::kFull}};
    static const std::map<std::string, storage::IoMode> kIo = {
        {"auto", storage::IoMode::kAuto},
        {"direct", storage::IoMode::kDirect},
        {"buffered", storage::IoMode::kBuffered}};
    o->sync = kSync.at(*sync);
    o->io_mode = kIo.at(*io);
    if (!fingerprint->empty()) {
      size_t used = 0;
      try {
        o->fingerprint = std::stoull(*fingerprint, &used, 16);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != fingerprint->size() || fingerprint->size() > 16) {
        *exit_code = ReportError(
            "bench storage",
            InvalidArgument("--fingerprint " + *fingerprint + ": expected up to 16 hex digits"));
        return;
      }
    }
    // SIGINT/SIGTERM stop the run between two slices of files; it removes what it created and
    // exits 128 + the signal (docs/cli.md).
    InstallStopHandlers();
    Result<storage::StorageBenchReport> r = storage::RunStorageBench(*o);
    if (!r.ok()) {
      *exit_code = ReportError("bench storage", r.status());
      return;
    }
    if (*json) {
      nlohmann::json j = {{"read_gbps", r->read_gbps},
                          {"write_gbps", r->write_gbps},
                          {"block_bytes", o->block_bytes},
                          {"queue_depth", o->queue_depth},
                          {"files", o->files}};
      if (*verbose_json) {
        j["fingerprint"] = fmt::format("{:016x}", r->fingerprint);
        j["model_dir"] = r->model_dir;
        j["write_seconds"] = r->write_seconds;
        j["read_seconds"] = r->read_seconds;
        j["read_cpu_seconds"] = r->read_cpu_seconds;
        j["direct_io"] = r->direct_io;
      }
      std::cout << j.dump() << "\n";
    } else {
      std::cout << "storage bench: " << o->files << " files x " << o->block_bytes
                << " bytes, queue depth " << o->queue_depth
                << (r->direct_io ? ", O_DIRECT" : ", buffered") << ", sync " << *sync << "\n"
                << "  write: " << r->write_gbps << " GB/s (" << r->write_seconds << " s)\n"
                << "  read:  " << r->read_gbps << " GB/s (" << r->read_seconds
                << " s, every block verified)\n";
    }
    *exit_code = kExitOk;
  });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
