// BlockStore read path: open, read through io_uring, verify, quarantine.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/storage/layout.h"
#include "storage/store_internal.h"
#include "storage/verify_pool.h"

namespace dualpath::storage {

using internal::IoOp;
using internal::ShortHex;

std::vector<ReadResult> BlockStore::ReadBatch(std::span<const ReadRequest> requests) {
  std::vector<ReadResult> results(requests.size());
  // The whole batch is queued from now on (the scheduler sees it at once), not only the part
  // that has reached io_uring.
  uint64_t bytes = 0;
  uint64_t tokens = 0;
  for (const ReadRequest& r : requests) {
    bytes += r.buffer.size();
    tokens += r.tokens;
  }
  read_queue_.Add(bytes, tokens, requests.size());
  ReadStreamImpl(
      requests.size(), [&](size_t i) { return requests[i]; },
      [&](size_t i, ReadResult&& r) { results[i] = std::move(r); }, /*preaccounted=*/true);
  return results;
}

std::pair<Status, kv::DecodedBlockFile> BlockStore::Verify(const ReadRequest& r, uint64_t done,
                                                           int fd) {
  Result<kv::DecodedBlockFile> decoded = kv::DecodeBlockFile(
      std::span<const std::byte>(r.buffer.data(), done), options_.model_fingerprint, r.hash);
  if (decoded.ok()) {
    counters_->hits.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes_read.fetch_add(done, std::memory_order_relaxed);
    IndexTouch(r.hash, kv::BlockFileSize(decoded->meta.PayloadBytes()));
    return {Status::Ok(), *decoded};
  }
  const Status& bad = decoded.status();
  if (bad.code() == Code::kKvTruncated && done == r.buffer.size()) {
    // The buffer filled up: the file may be whole but larger than the caller expected (another
    // block shape). That is the caller's mistake, not corruption; leave the file alone.
    return {InvalidArgument("read block=" + ShortHex(r.hash) + ": buffer of " +
                            std::to_string(r.buffer.size()) + " bytes too small: " + bad.message()),
            {}};
  }
  counters_->corrupt.fetch_add(1, std::memory_order_relaxed);
  log::Debug("storage: block {} failed verification: {}", ShortHex(r.hash), bad.ToString());
  Quarantine(r.hash, fd, CodeName(bad.code()));
  return {
      Status(Code::kStorageMiss, "block=" + ShortHex(r.hash) + " quarantined: " + bad.ToString()),
      {}};
}

void BlockStore::ReadStream(size_t n, const ReadSource& source, const ReadSink& sink) {
  ReadStreamImpl(n, source, sink, /*preaccounted=*/false);
}

void BlockStore::ReadStreamImpl(size_t n, const ReadSource& source, const ReadSink& sink,
                                bool preaccounted) {
  const uint32_t depth = options_.queue_depth;
  // State of the requests between Source and Sink: at most `depth` of them, with arbitrary
  // indices (completions arrive out of order), so a small map keyed by index.
  struct Pending {
    ReadRequest req;
    std::string path;
    int fd = -1;
  };
  std::unordered_map<size_t, Pending> pending;
  pending.reserve(depth * 2);
  counters_->reads.fetch_add(n, std::memory_order_relaxed);

  internal::UringEngine* ring = nullptr;  // set while the engine runs
  // Verification results from the pool, waiting to be finished on this thread.
  struct Verified {
    size_t index;
    Status status;
    kv::DecodedBlockFile block;
  };
  std::mutex vmu;
  std::condition_variable vcv;
  std::deque<Verified> verified;  // guarded by vmu
  size_t verifying = 0;           // posted and not yet in `verified`; guarded by vmu
  // Every request leaves the read queue exactly once, whatever happened to it.
  auto finish = [&](size_t i, Pending& p, Status status, kv::DecodedBlockFile block) {
    if (p.fd >= 0) {
      if (!direct_io()) {
        // Buffered fallback: drop the pages so the page cache does not fill with blocks that the
        // caller now holds in its own buffer.
        ::posix_fadvise(p.fd, 0, 0, POSIX_FADV_DONTNEED);
      }
      if (ring != nullptr) {
        (void)ring->CloseAsync(p.fd);  // a FLUSH round trip on FUSE: not on this thread
      } else {
        ::close(p.fd);
      }
      p.fd = -1;
    }
    read_queue_.Remove(p.req.buffer.size(), p.req.tokens, 1);
    ReadResult result{std::move(status), block};
    pending.erase(i);  // p is dangling from here on
    sink(i, std::move(result));
  };
  auto fail = [&](size_t i, Pending& p, Status status) { finish(i, p, std::move(status), {}); };
  // Finishes verified blocks. With `wait_below`, first waits until fewer than that many blocks
  // are being verified: at most queue_depth blocks wait for verification, so a caller's buffers
  // (2 x queue_depth) never run out.
  auto drain = [&](size_t wait_below) {
    std::deque<Verified> ready;
    {
      std::unique_lock lock(vmu);
      vcv.wait(lock, [&] { return verifying < wait_below; });
      ready.swap(verified);
    }
    for (Verified& v : ready) {
      finish(v.index, pending.at(v.index), std::move(v.status), v.block);
    }
  };
  const size_t kNoWait = ~size_t{0};

  auto prepare = [&](size_t i, IoOp& op) -> bool {
    drain(depth);
    Pending& p = pending[i];
    p.req = source(i);
    const ReadRequest& r = p.req;
    if (!preaccounted) {
      read_queue_.Add(r.buffer.size(), r.tokens, 1);
    }
    bool direct = direct_io();
    const auto addr = reinterpret_cast<uintptr_t>(r.buffer.data());
    if (r.buffer.size() < kv::kBlockFileHeaderBytes ||
        (direct && (addr % kIoAlign != 0 || r.buffer.size() % kIoAlign != 0))) {
      fail(i, p,
           InvalidArgument("read block=" + ShortHex(r.hash) + ": buffer of " +
                           std::to_string(r.buffer.size()) +
                           " bytes is too small or not 4096-aligned"));
      return false;
    }
    if (options_.faults != nullptr) {
      Status injected = options_.faults->BeforeRead(r.hash);
      if (!injected.ok()) {
        counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
        fail(i, p, injected);
        return false;
      }
    }
    p.path = BlockPath(model_dir_, r.hash);
    op.kind = internal::IoKind::kRead;
    // The open runs in the ring too (see IoOp::open_path): on a distributed file system it is a
    // round trip that would otherwise stall every other read's submission.
    op.open_path = p.path.c_str();
    // O_NONBLOCK: something other than a block file under a block's name (a FIFO) must fail
    // verification, not block the open forever; regular files ignore the flag.
    op.open_flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | internal::DirectFlag(direct);
    op.buf = r.buffer.data();
    op.len = r.buffer.size();
    op.direct = direct;
    return true;
  };

  // The open failed in the ring: a miss, an error, or O_DIRECT refused (read-only stores only
  // learn that here), in which case this one block is read with plain pread.
  auto open_failed = [&](size_t i, Pending& p, IoOp& op) -> bool {
    const ReadRequest& r = p.req;
    if (op.error == EINVAL && op.direct && options_.io_mode == IoMode::kAuto) {
      if (direct_.exchange(false)) {
        LogDirectRefused();
      }
      p.fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (p.fd >= 0) {
        uint64_t done = 0;
        while (done < r.buffer.size()) {
          ssize_t got = ::pread(p.fd, r.buffer.data() + done, r.buffer.size() - done,
                                static_cast<off_t>(done));
          if (got <= 0) {
            break;
          }
          done += static_cast<uint64_t>(got);
        }
        op.error = 0;
        op.done = done;
        op.direct = false;
        return true;  // verify as usual
      }
      op.error = errno;
    }
    if (op.error == ENOENT) {
      counters_->misses.fetch_add(1, std::memory_order_relaxed);
      fail(i, p, Status(Code::kStorageMiss, "block=" + ShortHex(r.hash) + " not stored"));
    } else {
      counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
      fail(i, p, ErrnoStatus("open " + p.path, op.error));
    }
    return false;
  };

  auto complete = [&](size_t i, IoOp& op) {
    drain(kNoWait);
    Pending& p = pending.at(i);
    const ReadRequest& r = p.req;
    if (op.fd >= 0) {
      p.fd = op.fd;  // opened by the ring; closed in finish
    }
    if (op.open_failed && !open_failed(i, p, op)) {
      return;
    }
    if (op.error != 0) {
      counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
      fail(i, p, ErrnoStatus("read block=" + ShortHex(r.hash), op.error));
      return;
    }
    if (verify_pool_ == nullptr) {
      auto [status, block] = Verify(r, op.done, p.fd);
      finish(i, p, std::move(status), block);
      return;
    }
    // Verify on the pool; the result comes back to this thread through `verified` (finish, the
    // sink and CloseAsync must stay on the ring's thread).
    {
      std::lock_guard lock(vmu);
      ++verifying;
    }
    verify_pool_->Post(
        [this, &vmu, &vcv, &verified, &verifying, i, req = r, done = op.done, fd = p.fd] {
          auto [status, block] = Verify(req, done, fd);
          std::lock_guard lock(vmu);
          verified.push_back({i, std::move(status), block});
          --verifying;
          vcv.notify_all();
        });
  };

  auto engine = engines_->Acquire();
  Status run = engine.ok() ? Status::Ok() : engine.status();
  size_t started = 0;
  if (engine.ok()) {
    ring = engine->get();
    run = (*engine)->Run(
        n,
        [&](size_t i, IoOp& op) {
          started = i + 1;
          return prepare(i, op);
        },
        complete);
    drain(1);  // everything posted is verified; closes still go through the ring
    ring = nullptr;
    if (run.ok()) {
      engines_->Release(std::move(*engine));
    }
    // else: drop the failed ring (destroying it cancels whatever it still holds).
  }
  drain(1);
  if (!run.ok()) {
    // Requests that reached the ring but did not complete, then those never started.
    while (!pending.empty()) {
      auto it = pending.begin();
      counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
      fail(it->first, it->second, run);
    }
    for (size_t i = started; i < n; ++i) {
      Pending& p = pending[i];
      p.req = source(i);
      if (!preaccounted) {
        read_queue_.Add(p.req.buffer.size(), p.req.tokens, 1);
      }
      counters_->read_errors.fetch_add(1, std::memory_order_relaxed);
      fail(i, p, run);
    }
  }
}

}  // namespace dualpath::storage
