// `dualpath bench storage`: write then read a set of block files through the storage tier
// (io_uring, O_DIRECT, verified reads) and report GB/s. See docs/storage.md.
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "dualpath/storage/bench.h"

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
  sub->add_option("--sync", *sync, "none|data|full: fdatasync before publish (default data)")
      ->check(CLI::IsMember({"none", "data", "full"}));
  sub->add_option("--io", *io, "auto|direct|buffered (default auto: O_DIRECT if accepted)")
      ->check(CLI::IsMember({"auto", "direct", "buffered"}));
  sub->add_flag("--keep", o->keep, "Keep the files (to read the same set with fio)");
  sub->add_flag("--json", *json, "Print one JSON object");
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
