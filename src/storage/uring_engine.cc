#include "storage/uring_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "dualpath/common/check.h"

namespace dualpath::storage::internal {

Result<std::unique_ptr<UringEngine>> UringEngine::Create(unsigned queue_depth) {
  if (queue_depth == 0 || queue_depth > 4096) {
    return InvalidArgument("io_uring queue depth " + std::to_string(queue_depth) +
                           " out of range [1, 4096]");
  }
  std::unique_ptr<UringEngine> engine(new UringEngine(queue_depth));
  int rc = io_uring_queue_init(queue_depth, &engine->ring_, 0);
  if (rc < 0) {
    // Set depth_ to 0 so the destructor knows there is no ring to tear down.
    engine->depth_ = 0;
    return IoError("io_uring_queue_init depth=" + std::to_string(queue_depth), -rc);
  }
  return engine;
}

UringEngine::~UringEngine() {
  if (depth_ != 0) {
    io_uring_queue_exit(&ring_);
  }
}

Status UringEngine::RegisterBuffers(std::span<const iovec> buffers) {
  if (buffers_registered_) {
    io_uring_unregister_buffers(&ring_);
    buffers_registered_ = false;
  }
  int rc = io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size()));
  if (rc < 0) {
    return IoError("io_uring_register_buffers count=" + std::to_string(buffers.size()), -rc);
  }
  buffers_registered_ = true;
  return Status::Ok();
}

io_uring_sqe* UringEngine::GetSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // Entries queued since the last submit occupy the submission queue: push them to the kernel.
    int rc = io_uring_submit(&ring_);
    if (rc < 0) {
      return nullptr;
    }
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

Status UringEngine::CloseAsync(int fd) {
  io_uring_sqe* sqe = GetSqe();
  if (sqe == nullptr) {
    ::close(fd);  // the ring cannot take it: close here
    return Status::Ok();
  }
  io_uring_prep_close(sqe, fd);
  io_uring_sqe_set_data64(sqe, kIgnoreUserData);
  return Status::Ok();
}

Status UringEngine::Queue(uint32_t slot, IoOp& op) {
  // The submission queue holds queue_depth entries and at most queue_depth operations are in
  // flight, but entries queued since the last submit (and CloseAsync entries) still occupy it.
  io_uring_sqe* sqe = GetSqe();
  if (sqe == nullptr) {
    return IoError("io_uring: no submission queue entry after submit");
  }
  if (op.open_path != nullptr && op.fd < 0) {
    op.opening = true;
    io_uring_prep_openat(sqe, AT_FDCWD, op.open_path, op.open_flags, 0);
    io_uring_sqe_set_data64(sqe, slot);
    return Status::Ok();
  }
  if (op.kind == IoKind::kFsync || op.synced) {
    io_uring_prep_fsync(sqe, op.fd, IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data64(sqe, slot);
    return Status::Ok();
  }
  std::byte* buf = op.buf + op.done;
  // A single read/write moves at most ~2 GiB; larger remainders complete as short transfers and
  // are resubmitted.
  uint64_t remaining = op.len - op.done;
  unsigned len = remaining > (1u << 30) ? (1u << 30) : static_cast<unsigned>(remaining);
  uint64_t off = op.offset + op.done;
  if (op.kind == IoKind::kRead) {
    if (op.buf_index >= 0) {
      io_uring_prep_read_fixed(sqe, op.fd, buf, len, off, op.buf_index);
    } else {
      io_uring_prep_read(sqe, op.fd, buf, len, off);
    }
  } else {
    if (op.buf_index >= 0) {
      io_uring_prep_write_fixed(sqe, op.fd, buf, len, off, op.buf_index);
    } else {
      io_uring_prep_write(sqe, op.fd, buf, len, off);
    }
  }
  io_uring_sqe_set_data64(sqe, slot);
  return Status::Ok();
}

Status UringEngine::Run(size_t n, const PrepareFn& prepare, const CompleteFn& complete) {
  std::vector<IoOp> slots(depth_);
  std::vector<size_t> slot_index(depth_);
  std::vector<uint32_t> free_slots;
  free_slots.reserve(depth_);
  for (uint32_t s = depth_; s > 0; --s) {
    free_slots.push_back(s - 1);
  }
  size_t next = 0;
  unsigned inflight = 0;
  // Fills every free slot, so the device sees the full queue depth.
  auto fill = [&]() -> Status {
    while (!free_slots.empty() && next < n) {
      uint32_t slot = free_slots.back();
      IoOp& op = slots[slot];
      op = IoOp{};
      size_t index = next++;
      if (!prepare(index, op)) {
        continue;
      }
      if (op.len == 0 && op.kind != IoKind::kFsync) {
        complete(index, op);
        continue;
      }
      free_slots.pop_back();
      slot_index[slot] = index;
      RETURN_IF_ERROR(Queue(slot, op));
      ++inflight;
    }
    return Status::Ok();
  };
  std::vector<std::pair<size_t, IoOp>> finished;
  finished.reserve(depth_);
  while (next < n || inflight > 0) {
    RETURN_IF_ERROR(fill());
    if (inflight == 0) {
      continue;
    }
    int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR) {
      return IoError("io_uring_submit_and_wait", -rc);
    }
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0;
    unsigned seen = 0;
    finished.clear();
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      if (io_uring_cqe_get_data64(cqe) == kIgnoreUserData) {
        continue;  // a CloseAsync
      }
      auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      IoOp& op = slots[slot];
      int res = cqe->res;
      bool done = false;
      if (res == -EINTR || res == -EAGAIN) {
        // Transient: resubmit the same step.
        op.opening = false;
      } else if (op.opening) {
        op.opening = false;
        if (res < 0) {
          op.error = -res;
          op.open_failed = true;
          done = true;
        } else {
          op.fd = res;  // now queue the read on it (below)
        }
      } else if (res < 0) {
        op.error = -res;
        done = true;
      } else if (op.kind == IoKind::kFsync || op.synced) {
        done = true;
      } else {
        op.done += static_cast<uint64_t>(res);
        if (op.done >= op.len) {
          done = true;
        } else if (res == 0) {
          // A read of 0 bytes is end of file; a write of 0 bytes makes no progress and would
          // loop forever, so it is reported as out of space (what the kernel means by it).
          if (op.kind == IoKind::kWrite) {
            op.error = ENOSPC;
          }
          done = true;
        } else if (op.kind == IoKind::kRead && op.direct && (op.offset + op.done) % 512 != 0) {
          done = true;  // end of file inside the last sector
        }
      }
      if (done && op.error == 0 && op.kind == IoKind::kWrite && op.sync_after && !op.synced &&
          op.done >= op.len) {
        // The write is whole: sync it in the same slot (a short write is not synced; it fails).
        op.synced = true;
        done = false;
      }
      if (done) {
        // The slot is free at once; the operation's result travels in the copy.
        finished.emplace_back(slot_index[slot], op);
        free_slots.push_back(slot);
        --inflight;
      } else {
        RETURN_IF_ERROR(Queue(slot, op));
      }
    }
    io_uring_cq_advance(&ring_, seen);
    if (finished.empty()) {
      continue;
    }
    // Re-arm the freed slots and hand them to the kernel BEFORE running the completions: a
    // completion may be CPU-heavy (the store verifies a 1 MiB checksum there), and the device
    // should stay busy meanwhile. So Prepare(j) for new operations may run before Complete(i)
    // of earlier ones.
    RETURN_IF_ERROR(fill());
    if (inflight > 0) {
      int rc2 = io_uring_submit(&ring_);
      if (rc2 < 0 && rc2 != -EINTR) {
        return IoError("io_uring_submit", -rc2);
      }
    }
    for (auto& [index, op] : finished) {
      complete(index, op);
    }
  }
  // Hand over CloseAsync entries queued by the last completions.
  int rc = io_uring_submit(&ring_);
  if (rc < 0 && rc != -EINTR) {
    return IoError("io_uring_submit", -rc);
  }
  return Status::Ok();
}

}  // namespace dualpath::storage::internal
