// The storage bandwidth benchmark behind `dualpath bench storage`: writes a set of block files
// through BlockStore::WriteStream, then reads and verifies them through ReadStream, and reports
// the bandwidth of each phase. The working set goes through O_DIRECT (or, where the file system
// refuses it, buffered I/O with the pages dropped after each file), so the page cache cannot hide
// the device.
//
// Thread safety: RunStorageBench is reentrant; it uses its own store and files.
//
// Part of dualpath_benchlib (docs/architecture.md): benchmark code stays out of the production
// libraries; it keeps the namespace of the component it measures (dualpath::storage).
#pragma once

#include <cstdint>
#include <string>

#include "dualpath/common/status.h"
#include "dualpath/storage/block_store.h"

namespace dualpath::storage {

struct StorageBenchOptions {
  std::string dir;                    // root of a fresh store (a new model directory inside it)
  uint64_t block_bytes = 1ull << 20;  // block FILE size (header included), multiple of 4096
  unsigned queue_depth = 32;
  unsigned verify_threads = 1;  // StoreOptions::verify_threads
  uint64_t files = 1024;
  SyncMode sync = SyncMode::kData;
  IoMode io_mode = IoMode::kAuto;
  bool keep = false;  // leave the files (e.g. for fio to read the same set)
  uint64_t seed = 1;
  // 0: a fresh random model directory. Otherwise that model directory (its hex name), e.g. to
  // read again a set kept by an earlier run.
  uint64_t fingerprint = 0;
  bool read_only = false;  // skip the write phase: read the set an earlier --keep run left
};

struct StorageBenchReport {
  double write_gbps = 0;  // 1e9 bytes per second, file bytes (0 with read_only)
  double read_gbps = 0;   // verified file bytes
  double write_seconds = 0;
  double read_seconds = 0;
  bool direct_io = false;
  std::string model_dir;  // where the files are (kept only with `keep`)
  uint64_t fingerprint = 0;
  double read_cpu_seconds = 0;  // user + system CPU time of this process during the read phase
};

// kInvalidArgument for bad options (naming the option); any write or read failure is an error
// (a benchmark that lost blocks has measured nothing).
Result<StorageBenchReport> RunStorageBench(const StorageBenchOptions& options);

}  // namespace dualpath::storage
