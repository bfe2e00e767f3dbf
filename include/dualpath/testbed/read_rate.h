// Measuring what a node's storage link delivers: read a file with O_DIRECT (so every byte crosses
// the link, never the page cache) and sample the link's receive counter after every block.
//
// Run inside the node's network namespace (`dualpath cluster exec NODE -- dualpath cluster read`),
// where /sys/class/net/<link>/statistics/rx_bytes is that node's counter. The result has the
// whole-read rate and a steady-state rate over the middle of the file (10% to 90% of its bytes),
// which leaves out the open, TCP slow start and the last partial window: that is the rate the
// link's shaper gives, the figure the testbed's acceptance is about.
//
// Thread safety: MeasureRead is a free function with no shared state (it starts `streams`
// threads of its own and joins them before returning).
#pragma once

#include <cstdint>
#include <string>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"

namespace dualpath::testbed {

struct ReadRateOptions {
  std::string path;                      // file to read, start to end
  size_t block_bytes = 4 * 1024 * 1024;  // a multiple of 4096 (O_DIRECT)
  std::string rx_counter;  // e.g. /sys/class/net/stor0/statistics/rx_bytes; empty: no counter
  // Concurrent sequential readers, each over its own contiguous part of the file. One stream
  // over FUSE has one 128 KiB request in flight at a time, so every scheduling delay of the
  // GlusterFS client idles the link; a few streams keep the shaper's queue full, like a real
  // loader with a queue depth (io_uring) does.
  int streams = 4;
};

struct ReadRateResult {
  uint64_t file_bytes = 0;
  Nanos elapsed = 0;
  uint64_t link_bytes = 0;     // counter delta over the whole read (0 without a counter)
  double file_bps = 0;         // file bits / elapsed
  double link_bps = 0;         // link bits / elapsed
  double steady_link_bps = 0;  // link bits / time between the 10% and 90% samples
  Nanos steady_window = 0;
};

Result<ReadRateResult> MeasureRead(const ReadRateOptions& options, const Clock& clock);

}  // namespace dualpath::testbed
