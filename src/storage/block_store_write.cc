// BlockStore write path: encode, write a temporary file through io_uring, sync, rename.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
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
  const size_t n = blocks.size();
  std::vector<Status> results(n, Status::Ok());
  std::vector<int> fds(n, -1);
  std::vector<std::string> tmps(n);
  // Stage of each block: 0 nothing to do (done or failed), 1 written, waiting for sync + publish.
  std::vector<uint8_t> pending(n, 0);

  // Undoes a block's temporary file; nothing was ever visible under its block name.
  auto fail = [&](size_t i, Status status) {
    if (fds[i] >= 0) {
      ::close(fds[i]);
      fds[i] = -1;
    }
    if (!tmps[i].empty()) {
      ::unlink(tmps[i].c_str());
    }
    pending[i] = 0;
    results[i] = std::move(status);
    counters_->write_errors.fetch_add(1, std::memory_order_relaxed);
  };

  auto engine = engines_->Acquire();
  if (!engine.ok()) {
    for (size_t i = 0; i < n; ++i) {
      fail(i, engine.status());
    }
    return results;
  }

  auto prepare = [&](size_t i, IoOp& op) -> bool {
    const EncodedBlock& b = blocks[i];
    if (b.file_bytes < kv::kBlockFileHeaderBytes || b.file_bytes % kIoAlign != 0 ||
        b.file.capacity() < b.file_bytes) {
      fail(i, InvalidArgument("write block=" + ShortHex(b.hash) + ": not an encoded block file"));
      return false;
    }
    std::string path = BlockPath(model_dir_, b.hash);
    if (::access(path.c_str(), F_OK) == 0) {
      // Already published (by us, another process or another node): block files are a pure
      // function of (model, hash), so there is nothing to add.
      counters_->write_dedup.fetch_add(1, std::memory_order_relaxed);
      IndexTouch(b.hash, b.file_bytes);
      return false;
    }
    tmps[i] = TmpPath(model_dir_, b.hash, host_, ::getpid(), NextSeq());
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | internal::DirectFlag(direct_);
    int fd = ::open(tmps[i].c_str(), flags, 0644);
    if (fd < 0 && errno == ENOENT) {
      Status made = internal::MakeDirs(BlockDir(model_dir_, b.hash));
      if (!made.ok()) {
        tmps[i].clear();
        fail(i, made.WithContext("write block=" + ShortHex(b.hash)));
        return false;
      }
      fd = ::open(tmps[i].c_str(), flags, 0644);
    }
    if (fd < 0) {
      int err = errno;
      std::string tmp = std::move(tmps[i]);
      tmps[i].clear();  // not created: nothing to unlink
      fail(i, ErrnoStatus("create " + tmp, err));
      return false;
    }
    fds[i] = fd;
    op.kind = internal::IoKind::kWrite;
    op.fd = fd;
    // const_cast: io_uring's write API takes a non-const pointer but only reads the buffer.
    op.buf = const_cast<std::byte*>(b.file.data());
    op.len = options_.faults != nullptr ? options_.faults->WriteLimit(b.hash, b.file_bytes)
                                        : b.file_bytes;
    op.direct = direct_;
    return true;
  };

  auto written = [&](size_t i, IoOp& op) {
    const EncodedBlock& b = blocks[i];
    if (op.error != 0) {
      fail(i, ErrnoStatus("write " + tmps[i], op.error));
    } else if (op.done < b.file_bytes) {
      fail(i,
           Status(Code::kStorageNoSpace, "short write " + tmps[i] + ": " + std::to_string(op.done) +
                                             " of " + std::to_string(b.file_bytes) + " bytes"));
    } else {
      pending[i] = 1;
    }
  };

  Status run = (*engine)->Run(n, prepare, written);
  if (run.ok() && options_.sync != SyncMode::kNone) {
    // All files sync in parallel: on a device with a write cache each fdatasync is a flush, and
    // issuing them together lets the device (or the distributed FS) merge them.
    std::vector<size_t> to_sync;
    for (size_t i = 0; i < n; ++i) {
      if (pending[i] == 1) {
        to_sync.push_back(i);
      }
    }
    run = (*engine)->Run(
        to_sync.size(),
        [&](size_t k, IoOp& op) {
          op.kind = internal::IoKind::kFsync;
          op.fd = fds[to_sync[k]];
          return true;
        },
        [&](size_t k, IoOp& op) {
          if (op.error != 0) {
            fail(to_sync[k], ErrnoStatus("fdatasync " + tmps[to_sync[k]], op.error));
          }
        });
  }
  if (run.ok()) {
    engines_->Release(std::move(*engine));
  }

  std::set<std::string> dirs_to_sync;
  for (size_t i = 0; i < n; ++i) {
    if (!run.ok() && (pending[i] == 1 || fds[i] >= 0)) {
      fail(i, run);
      continue;
    }
    if (pending[i] != 1) {
      continue;
    }
    const EncodedBlock& b = blocks[i];
    if (!direct_) {
      ::posix_fadvise(fds[i], 0, 0, POSIX_FADV_DONTNEED);
    }
    ::close(fds[i]);
    fds[i] = -1;
    if (options_.faults != nullptr) {
      options_.faults->BeforePublish(b.hash);
    }
    // The publishing step: rename is atomic, so the block name shows either nothing or the whole
    // verified-to-be-written file. If another writer published the same block meanwhile, this
    // replaces equal bytes with equal bytes; readers holding the old file keep reading it.
    std::string path = BlockPath(model_dir_, b.hash);
    if (::rename(tmps[i].c_str(), path.c_str()) != 0) {
      fail(i, ErrnoStatus("rename " + tmps[i] + " -> " + path, errno));
      continue;
    }
    tmps[i].clear();
    pending[i] = 0;
    counters_->writes.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes_written.fetch_add(b.file_bytes, std::memory_order_relaxed);
    if (options_.sync == SyncMode::kFull) {
      dirs_to_sync.insert(BlockDir(model_dir_, b.hash));
    }
    IndexInsert(b.hash, b.file_bytes);
  }
  for (const std::string& dir : dirs_to_sync) {
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) {
      // The blocks are published and readable; only their survival of a power cut is in doubt.
      log::Warn("storage: fsync directory {} failed: {}", dir, std::strerror(errno));
    }
    if (dfd >= 0) {
      ::close(dfd);
    }
  }
  return results;
}

}  // namespace dualpath::storage
