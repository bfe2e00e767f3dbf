// BlockStore::ReadBatch: open, read through io_uring, verify, quarantine.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/storage/layout.h"
#include "storage/store_internal.h"

namespace dualpath::storage {

using internal::IoOp;
using internal::ShortHex;

std::vector<ReadResult> BlockStore::ReadBatch(std::span<const ReadRequest> requests) {
  const size_t n = requests.size();
  std::vector<ReadResult> results(n);
  std::vector<int> fds(n, -1);
  std::vector<bool> finished(n, false);
  uint64_t total_bytes = 0;
  uint64_t total_tokens = 0;
  for (const ReadRequest& r : requests) {
    total_bytes += r.buffer.size();
    total_tokens += r.tokens;
  }
  read_queue_.Add(total_bytes, total_tokens, n);
  counters_->reads.fetch_add(n, std::memory_order_relaxed);

  // Every request leaves the read queue exactly once, whatever happened to it.
  auto finish = [&](size_t i, Status status) {
    results[i].status = std::move(status);
    if (fds[i] >= 0) {
      if (!direct_) {
        // Buffered fallback: drop the pages so the page cache does not fill with blocks that the
        // caller now holds in its own buffer.
        ::posix_fadvise(fds[i], 0, 0, POSIX_FADV_DONTNEED);
      }
      ::close(fds[i]);
      fds[i] = -1;
    }
    finished[i] = true;
    read_queue_.Remove(requests[i].buffer.size(), requests[i].tokens, 1);
  };

  auto engine = engines_->Acquire();
  if (!engine.ok()) {
    for (size_t i = 0; i < n; ++i) {
      counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
      finish(i, engine.status());
    }
    return results;
  }

  auto prepare = [&](size_t i, IoOp& op) -> bool {
    const ReadRequest& r = requests[i];
    const auto addr = reinterpret_cast<uintptr_t>(r.buffer.data());
    if (r.buffer.size() < kv::kBlockFileHeaderBytes ||
        (direct_ && (addr % kIoAlign != 0 || r.buffer.size() % kIoAlign != 0))) {
      finish(i, InvalidArgument("read block=" + ShortHex(r.hash) + ": buffer of " +
                                std::to_string(r.buffer.size()) +
                                " bytes is too small or not 4096-aligned"));
      return false;
    }
    if (options_.faults != nullptr) {
      Status injected = options_.faults->BeforeRead(r.hash);
      if (!injected.ok()) {
        counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
        finish(i, injected);
        return false;
      }
    }
    std::string path = BlockPath(model_dir_, r.hash);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | internal::DirectFlag(direct_));
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT) {
        counters_->misses.fetch_add(1, std::memory_order_relaxed);
        finish(i, Status(Code::kStorageMiss, "block=" + ShortHex(r.hash) + " not stored"));
      } else {
        counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
        finish(i, ErrnoStatus("open " + path, err));
      }
      return false;
    }
    fds[i] = fd;
    op.kind = internal::IoKind::kRead;
    op.fd = fd;
    op.buf = r.buffer.data();
    op.len = r.buffer.size();
    op.direct = direct_;
    return true;
  };

  auto complete = [&](size_t i, IoOp& op) {
    const ReadRequest& r = requests[i];
    if (op.error != 0) {
      counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
      finish(i, ErrnoStatus("read block=" + ShortHex(r.hash), op.error));
      return;
    }
    Result<kv::DecodedBlockFile> decoded = kv::DecodeBlockFile(
        std::span<const std::byte>(r.buffer.data(), op.done), options_.model_fingerprint, r.hash);
    if (decoded.ok()) {
      counters_->hits.fetch_add(1, std::memory_order_relaxed);
      counters_->bytes_read.fetch_add(op.done, std::memory_order_relaxed);
      results[i].block = *decoded;
      IndexTouch(r.hash, kv::BlockFileSize(decoded->meta.PayloadBytes()));
      finish(i, Status::Ok());
      return;
    }
    const Status& bad = decoded.status();
    if (bad.code() == Code::kKvTruncated && op.done == r.buffer.size()) {
      // The buffer filled up: the file may be whole but larger than the caller expected (another
      // block shape). That is the caller's mistake, not corruption; leave the file alone.
      finish(i, InvalidArgument("read block=" + ShortHex(r.hash) + ": buffer of " +
                                std::to_string(r.buffer.size()) +
                                " bytes too small: " + bad.message()));
      return;
    }
    counters_->corrupt.fetch_add(1, std::memory_order_relaxed);
    log::Debug("storage: block {} failed verification: {}", ShortHex(r.hash), bad.ToString());
    Quarantine(r.hash, fds[i], CodeName(bad.code()));
    finish(i, Status(Code::kStorageMiss,
                     "block=" + ShortHex(r.hash) + " quarantined: " + bad.ToString()));
  };

  Status run = (*engine)->Run(n, prepare, complete);
  if (run.ok()) {
    engines_->Release(std::move(*engine));
  } else {
    // The ring failed: drop it (destroying it cancels whatever it still holds) and fail the rest.
    for (size_t i = 0; i < n; ++i) {
      if (!finished[i]) {
        counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
        finish(i, run);
      }
    }
  }
  return results;
}

}  // namespace dualpath::storage
