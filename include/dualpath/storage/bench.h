// The storage bandwidth benchmark behind `dualpath bench storage`: writes a set of block files
// through BlockStore::WriteStream, then reads and verifies them through ReadStream, and reports
// the bandwidth of each phase. The working set goes through O_DIRECT (or, where the file system
// refuses it, buffered I/O with the pages dropped after each file), so the page cache cannot hide
// the device.
//
// Thread safety: RunStorageBench is reentrant; it uses its own store and files.
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
  uint64_t files = 1024;
  SyncMode sync = SyncMode::kData;
  IoMode io_mode = IoMode::kAuto;
  bool keep = false;  // leave the files (e.g. for fio to read the same set)
  uint64_t seed = 1;
};

struct StorageBenchReport {
  double write_gbps = 0;  // 1e9 bytes per second, file bytes
  double read_gbps = 0;   // verified file bytes
  double write_seconds = 0;
  double read_seconds = 0;
  bool direct_io = false;
  std::string model_dir;  // where the files are (kept only with `keep`)
};

// kInvalidArgument for bad options (naming the option); any write or read failure is an error
// (a benchmark that lost blocks has measured nothing).
Result<StorageBenchReport> RunStorageBench(const StorageBenchOptions& options);

}  // namespace dualpath::storage
