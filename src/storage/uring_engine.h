// UringEngine: runs a batch of file reads/writes through one io_uring with at most `queue_depth`
// operations in flight, resubmitting short transfers, so callers see each operation either fully
// done, stopped at end of file (reads), or failed with an errno.
//
// Operations are produced lazily: Prepare(i) is called when a slot frees up, so the caller can
// open file i+1 while reads of files 0..i are in flight (the open cost overlaps the I/O), and
// Complete(i) is called as soon as operation i finishes, so the caller can close and validate it
// without waiting for the whole batch. Freed slots are refilled and submitted before the
// completions run, so Complete's CPU work (checksums) overlaps the device's; a caller recycling
// buffers therefore needs up to 2 x queue_depth of them.
//
// Thread safety: one engine is used by one thread at a time (io_uring's submission and completion
// queues are single-producer/single-consumer). BlockStore keeps a pool of engines for concurrent
// callers.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include "dualpath/common/status.h"

namespace dualpath::storage::internal {

// kFsync is fdatasync(fd) (len is ignored): batched so N files sync in parallel, not one by one.
enum class IoKind : uint8_t { kRead, kWrite, kFsync };

struct IoOp {
  IoKind kind = IoKind::kRead;
  int fd = -1;
  std::byte* buf = nullptr;
  uint64_t len = 0;     // bytes to transfer
  uint64_t offset = 0;  // file offset of buf[0]
  int buf_index = -1;   // registered buffer index (READ_FIXED/WRITE_FIXED), or -1
  // The fd was opened with O_DIRECT: a read that stops short at an offset that is not a multiple
  // of 512 can only be end of file (direct I/O moves whole sectors), and resubmitting at that
  // unaligned offset would fail with EINVAL.
  bool direct = false;
  // Writes only: after the write completes, fdatasync the fd in the same slot before reporting
  // completion (durable before the caller publishes it). A failed sync sets error.
  bool sync_after = false;
  bool synced = false;  // internal: the sync has been queued
  // Reads only: when set (and fd < 0), the engine first opens this path with open_flags through
  // io_uring, then reads from the new fd (left in `fd` for the caller to close). Opening in the
  // ring keeps a slow open (a network round trip on FUSE and distributed file systems) off the
  // submitting thread. The path must stay valid until Complete.
  const char* open_path = nullptr;
  int open_flags = 0;
  bool opening = false;      // internal: the open is in flight
  bool open_failed = false;  // result: the open failed (error holds its errno; nothing was read)
  // Results, valid in Complete.
  uint64_t done = 0;  // bytes transferred
  int error = 0;      // errno of the failed transfer; 0 when none failed
};

class UringEngine {
 public:
  // Prepare(i, op) fills op for index i (op starts default-constructed); returning false skips i
  // (the caller recorded its own failure, e.g. the open failed).
  using PrepareFn = std::function<bool(size_t index, IoOp& op)>;
  // Complete(i, op) is called exactly once for every prepared op.
  using CompleteFn = std::function<void(size_t index, IoOp& op)>;

  static Result<std::unique_ptr<UringEngine>> Create(unsigned queue_depth);
  ~UringEngine();
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  unsigned queue_depth() const { return depth_; }

  // Registers buffers for fixed reads/writes (pins the pages once instead of per operation).
  // Replaces any earlier registration.
  Status RegisterBuffers(std::span<const iovec> buffers);

  // Closes `fd` through the ring without waiting (close on FUSE is a FLUSH round trip, which
  // io_uring runs on a worker thread). Submitted with the next Run activity or at the latest by
  // the next Run/destructor.
  Status CloseAsync(int fd);

  // Runs operations 0..n-1. Returns non-OK only when the ring itself fails (then some operations
  // may not have been completed); per-operation errors are reported through IoOp::error.
  Status Run(size_t n, const PrepareFn& prepare, const CompleteFn& complete);

 private:
  explicit UringEngine(unsigned depth) : depth_(depth) {}
  Status Queue(uint32_t slot, IoOp& op);
  io_uring_sqe* GetSqe();
  static constexpr uint64_t kIgnoreUserData = ~uint64_t{0};

  unsigned depth_;
  io_uring ring_{};
  bool buffers_registered_ = false;
};

}  // namespace dualpath::storage::internal
