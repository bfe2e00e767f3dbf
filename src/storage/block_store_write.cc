// BlockStore write path: encode, write a temporary file through io_uring (synced in the same
// io_uring slot), rename it over the block name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "dualpath/common/log.h"
#include "dualpath/storage/block_store.h"
#include "dualpath/storage/layout.h"
#include "storage/store_internal.h"

namespace dualpath::storage {

using internal::IoOp;
using internal::ShortHex;

Result<EncodedBlock> BlockStore::Encode(const kv::BlockHash& hash, const kv::BlockShape& shape,
                                        std::span<const std::byte> payload) const {
  if (payload.size() != shape.FullBytes()) {
    return InvalidArgument("encode block=" + ShortHex(hash) + ": payload of " +
                           std::to_string(payload.size()) + " bytes, shape says " +
                           std::to_string(shape.FullBytes()));
  }
  kv::BlockFileMeta meta;
  meta.model_fingerprint = options_.model_fingerprint;
  meta.block_hash = hash;
  meta.token_count = shape.tokens;
  meta.num_layers = shape.num_layers;
  meta.bytes_per_token_per_layer = shape.bytes_per_token_per_layer;
  EncodedBlock block;
  block.hash = hash;
  block.file_bytes = kv::BlockFileSize(payload.size());
  block.file = AlignedBuffer(block.file_bytes);
  RETURN_IF_ERROR(kv::EncodeBlockFile(meta, payload, block.file.span()));
  return block;
}

Status BlockStore::Write(const kv::BlockHash& hash, const kv::BlockShape& shape,
                         std::span<const std::byte> payload) {
  ASSIGN_OR_RETURN(EncodedBlock block, Encode(hash, shape, payload));
  return WriteBatch({&block, 1})[0];
}

std::vector<Status> BlockStore::WriteBatch(std::span<const EncodedBlock> blocks) {
  std::vector<Status> results(blocks.size());
  WriteStream(
      blocks.size(), [&](size_t i) -> const EncodedBlock& { return blocks[i]; },
      [&](size_t i, Status st, bool /*created*/) { results[i] = std::move(st); });
  return results;
}

void BlockStore::WriteStream(size_t n, const WriteSource& source, const WriteSink& sink) {
  struct Pending {
    const EncodedBlock* block = nullptr;
    std::string tmp;  // empty once there is no temporary file to clean up
    int fd = -1;
  };
  std::unordered_map<size_t, Pending> pending;
  pending.reserve(options_.queue_depth * 2);

  auto done = [&](size_t i, Status status, bool created = false) {
    pending.erase(i);
    sink(i, std::move(status), created);
  };
  // Undoes a block's temporary file; nothing was ever visible under its block name.
  auto fail = [&](size_t i, Pending& p, Status status) {
    if (p.fd >= 0) {
      ::close(p.fd);
    }
    if (!p.tmp.empty()) {
      ::unlink(p.tmp.c_str());
    }
    counters_->write_errors.fetch_add(1, std::memory_order_relaxed);
    done(i, std::move(status));
  };

  auto prepare = [&](size_t i, IoOp& op) -> bool {
    Pending& p = pending[i];
    p.block = &source(i);
    const EncodedBlock& b = *p.block;
    if (b.file_bytes < kv::kBlockFileHeaderBytes || b.file_bytes % kIoAlign != 0 ||
        b.file.capacity() < b.file_bytes) {
      fail(i, p,
           InvalidArgument("write block=" + ShortHex(b.hash) + ": not an encoded block file"));
      return false;
    }
    if (options_.read_only) {
      fail(i, p,
           FailedPrecondition("write block=" + ShortHex(b.hash) + ": store " + model_dir_ +
                              " was opened read-only"));
      return false;
    }
    std::string path = BlockPath(model_dir_, b.hash);
    if (::access(path.c_str(), F_OK) == 0) {
      // Already published (by us, another process or another node): a block file is a pure
      // function of (model, hash), so there is nothing to add.
      counters_->write_dedup.fetch_add(1, std::memory_order_relaxed);
      IndexTouch(b.hash, b.file_bytes);
      done(i, Status::Ok());
      return false;
    }
    std::string tmp = TmpPath(model_dir_, b.hash, host_, ::getpid(), NextSeq());
    const bool direct = direct_io();
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | internal::DirectFlag(direct);
    int fd = ::open(tmp.c_str(), flags, kStoreFileMode);
    if (fd < 0 && errno == ENOENT) {
      // First block in this fan-out directory.
      Status made = internal::MakeDirs(BlockDir(model_dir_, b.hash));
      if (!made.ok()) {
        fail(i, p, made.WithContext("write block=" + ShortHex(b.hash)));
        return false;
      }
      fd = ::open(tmp.c_str(), flags, kStoreFileMode);
    }
    if (fd < 0) {
      fail(i, p, ErrnoStatus("create " + tmp, errno));
      return false;
    }
    p.tmp = std::move(tmp);
    p.fd = fd;
    op.kind = internal::IoKind::kWrite;
    op.fd = fd;
    // const_cast: io_uring's write API takes a non-const pointer but only reads the buffer.
    op.buf = const_cast<std::byte*>(b.file.data());
    op.len = options_.faults != nullptr ? options_.faults->WriteLimit(b.hash, b.file_bytes)
                                        : b.file_bytes;
    op.direct = direct;
    // Durable before visible: the fdatasync runs in the same slot, before the rename below.
    op.sync_after = options_.sync != SyncMode::kNone;
    return true;
  };

  auto complete = [&](size_t i, IoOp& op) {
    Pending& p = pending.at(i);
    const EncodedBlock& b = *p.block;
    if (op.error != 0) {
      fail(i, p, ErrnoStatus((op.synced ? "fdatasync " : "write ") + p.tmp, op.error));
      return;
    }
    if (op.done < b.file_bytes) {
      fail(i, p,
           Status(Code::kStorageNoSpace, "short write " + p.tmp + ": " + std::to_string(op.done) +
                                             " of " + std::to_string(b.file_bytes) + " bytes"));
      return;
    }
    if (!op.direct) {
      ::posix_fadvise(p.fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    ::close(p.fd);
    p.fd = -1;
    if (options_.faults != nullptr) {
      options_.faults->BeforePublish(b.hash);
    }
    // The publishing step. rename is atomic: the block name shows either nothing or the whole
    // written file. RENAME_NOREPLACE: if another writer published the same block meanwhile, its
    // file stays (equal bytes) and this write is a dedup, so exactly one writer is told it
    // created the file (a benchmark removes only the files it created). File systems without
    // the flag (EINVAL; some FUSE and network file systems) take a plain rename: equal bytes
    // replace equal bytes, readers holding the old file keep reading it.
    std::string path = BlockPath(model_dir_, b.hash);
    int rc = ::renameat2(AT_FDCWD, p.tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      rc = ::rename(p.tmp.c_str(), path.c_str());
    }
    if (rc != 0 && errno == EEXIST) {
      ::unlink(p.tmp.c_str());
      counters_->write_dedup.fetch_add(1, std::memory_order_relaxed);
      IndexTouch(b.hash, b.file_bytes);
      done(i, Status::Ok());
      return;
    }
    if (rc != 0) {
      fail(i, p, ErrnoStatus("rename " + p.tmp + " -> " + path, errno));
      return;
    }
    p.tmp.clear();
    if (options_.sync == SyncMode::kFull) {
      // Make the new name itself survive a power cut.
      std::string dir = BlockDir(model_dir_, b.hash);
      int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd < 0 || ::fsync(dfd) != 0) {
        log::Warn("storage: fsync directory {} failed: {}", dir, std::strerror(errno));
      }
      if (dfd >= 0) {
        ::close(dfd);
      }
    }
    counters_->writes.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes_written.fetch_add(b.file_bytes, std::memory_order_relaxed);
    IndexInsert(b.hash, b.file_bytes);
    done(i, Status::Ok(), /*created=*/true);
  };

  auto engine = engines_->Acquire();
  Status run = engine.ok() ? Status::Ok() : engine.status();
  size_t started = 0;
  if (engine.ok()) {
    run = (*engine)->Run(
        n,
        [&](size_t i, IoOp& op) {
          started = i + 1;
          return prepare(i, op);
        },
        complete);
    if (run.ok()) {
      engines_->Release(std::move(*engine));
    }
  }
  if (!run.ok()) {
    while (!pending.empty()) {
      auto it = pending.begin();
      fail(it->first, it->second, run);
    }
    for (size_t i = started; i < n; ++i) {
      Pending& p = pending[i];
      p.block = &source(i);
      fail(i, p, run);
    }
  }
}

}  // namespace dualpath::storage
