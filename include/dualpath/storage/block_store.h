// BlockStore: the persistent KV tier. Full Block files (kv/block_file.h format) keyed by block
// hash under a root directory on any POSIX file system: a local NVMe directory or the mount of a
// distributed file system (3FS, CephFS, Lustre, GlusterFS). One store per node and model.
//
// Reads and writes are batched through io_uring with O_DIRECT where the file system accepts it
// (buffered I/O plus posix_fadvise(DONTNEED) otherwise, announced by one log line at Open).
// Writes publish atomically: the file is written under a temporary name in the block's own
// directory, synced as configured, then renamed to the block name, so no process on any node
// ever sees a partial block under a block's name; two writers publishing the same block is
// harmless (equal bytes: the first rename wins, the second finds the name taken and drops its
// temporary file; where the file system has no renameat2(RENAME_NOREPLACE) the last one wins).
// Every read is fully verified (header checksum, model fingerprint, block hash, payload checksum);
// a file that fails is a miss, counted and moved to the quarantine directory, never returned as
// data. See docs/storage.md and docs/formats/storage_layout.md.
//
// The in-memory index (rebuilt by scanning the root at Open, which also removes temporary files
// left by crashed writers) drives a capacity limit with least-recently-used eviction. The index is
// per process: files published by other processes or nodes are still found by reads (which always
// ask the file system) and join the index when first read.
//
// Ownership: the caller owns request buffers; results point into them. Thread safety: every
// method may be called from any thread concurrently (each batch takes an io_uring engine from a
// pool; the index is guarded by a mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/block_hash.h"
#include "dualpath/kv/layout.h"
#include "dualpath/storage/aligned_buffer.h"
#include "dualpath/storage/faults.h"
#include "dualpath/storage/read_queue.h"

namespace dualpath::storage {
namespace internal {
class VerifyPool;
}  // namespace internal

enum class IoMode {
  kAuto,      // O_DIRECT if the file system accepts it, buffered otherwise (logged once)
  kDirect,    // O_DIRECT or fail Open
  kBuffered,  // page cache, with posix_fadvise(DONTNEED) after each file
};

enum class SyncMode {
  kNone,  // no fsync: fastest; a crash may lose recent blocks (a torn one is still detected)
  kData,  // fdatasync each file before its publishing rename (default)
  kFull,  // kData, plus fsync of the directory after the rename (the name survives a crash)
};

struct StoreOptions {
  std::string root;                // created if missing
  uint64_t model_fingerprint = 0;  // kv::ModelFingerprint(model); names the model's directory
  uint64_t capacity_bytes = 0;     // 0 = unlimited; otherwise LRU eviction above it
  IoMode io_mode = IoMode::kAuto;
  SyncMode sync = SyncMode::kData;
  unsigned queue_depth = 32;  // io_uring operations in flight per batch
  // Threads verifying checksums of read blocks, off the submitting thread (0: verify inline).
  unsigned verify_threads = 1;
  bool scan_on_open = true;         // rebuild the index and clean stale temporary files
  int64_t stale_tmp_seconds = 600;  // another host's temporary file older than this is removed
  StorageFaults* faults = nullptr;  // fault points for tests; not owned
  // Reads only, and change nothing on disk: the model directory must exist (kNotFound
  // otherwise; nothing is created, not even a probe file), writes and Remove fail with
  // kFailedPrecondition, a file that fails verification is a miss but is not moved to
  // quarantine, and neither the scan nor the capacity limit removes anything.
  bool read_only = false;
};

// A block file image ready to write: header + payload + padding in an aligned buffer.
struct EncodedBlock {
  kv::BlockHash hash;
  AlignedBuffer file;       // capacity >= file_bytes
  uint64_t file_bytes = 0;  // kv::BlockFileSize(payload bytes)
};

struct ReadRequest {
  kv::BlockHash hash;
  // Where the block file is read to: address and size multiples of kIoAlign, size >=
  // kv::BlockFileSize(payload bytes) (see BlockStore::FileBytes).
  std::span<std::byte> buffer;
  uint32_t tokens = 0;  // for the read-queue accounting only
};

struct ReadResult {
  // OK: `block` is verified data. kStorageMiss: no such block, or its file failed verification
  // (counted and quarantined; the message says why). kInvalidArgument: the request's buffer is
  // too small or misaligned. Other codes (kIoError, kPermissionDenied): the store itself is sick.
  Status status;
  kv::DecodedBlockFile block;  // payload points into the request's buffer
};

struct StoreStats {
  uint64_t reads = 0;          // blocks requested
  uint64_t hits = 0;           // verified blocks returned
  uint64_t misses = 0;         // no file under the block's name
  uint64_t corrupt = 0;        // files that failed verification (all quarantined)
  uint64_t read_errors = 0;    // I/O or permission errors on read
  uint64_t writes = 0;         // blocks published by this store
  uint64_t write_dedup = 0;    // writes skipped because the block was already published
  uint64_t write_errors = 0;   // writes that failed (nothing published)
  uint64_t evictions = 0;      // blocks removed to stay under capacity
  uint64_t tmp_cleaned = 0;    // stale temporary files removed
  uint64_t bytes_read = 0;     // file bytes of verified reads
  uint64_t bytes_written = 0;  // file bytes of published writes
  uint64_t indexed_blocks = 0;
  uint64_t indexed_bytes = 0;
};

class BlockStore {
 public:
  // Creates <root>/<fingerprint hex>/ if needed, decides the I/O mode, and (if scan_on_open)
  // rebuilds the index. Errors: kInvalidArgument for bad options, kPermissionDenied / kIoError
  // naming the directory that could not be created or probed.
  static Result<std::unique_ptr<BlockStore>> Open(const StoreOptions& options);
  ~BlockStore();
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  // <root>/<fingerprint as 16 hex digits>: the directory a store of this model uses (trailing
  // slashes of root ignored).
  static std::string ModelDir(const std::string& root, uint64_t model_fingerprint);

  // File bytes (and the read buffer size) for a block of `shape`.
  static uint64_t FileBytes(const kv::BlockShape& shape) {
    return kv::BlockFileSize(shape.FullBytes());
  }

  // Builds the file image for a block (one copy of the payload, one checksum pass).
  // kInvalidArgument if payload.size() != shape.FullBytes().
  Result<EncodedBlock> Encode(const kv::BlockHash& hash, const kv::BlockShape& shape,
                              std::span<const std::byte> payload) const;

  // Publishes blocks; returns one status per block (OK also when the block already existed).
  // kStorageNoSpace when the file system is full, kPermissionDenied, kIoError otherwise; a failed
  // write leaves nothing under the block's name and no temporary file.
  std::vector<Status> WriteBatch(std::span<const EncodedBlock> blocks);
  // Streaming form: Source(i) is asked for block i when an io_uring slot is free (the block must
  // stay alive until Sink(i) is called), Sink(i, status, created) once block i is published or
  // failed. `created` is true only when this call put the file under the block's name; false
  // when the name was already taken (by anyone: the publishing rename never replaces a file, so
  // two writers of one block cannot both claim it) or on failure. A caller that must remove what
  // it wrote (a benchmark) removes exactly the blocks with created == true.
  // Up to queue_depth blocks are in flight and Sinks may lag Sources by as many again, so
  // 2 x queue_depth buffers stream any number of blocks.
  using WriteSource = std::function<const EncodedBlock&(size_t index)>;
  using WriteSink = std::function<void(size_t index, Status status, bool created)>;
  void WriteStream(size_t n, const WriteSource& source, const WriteSink& sink);
  // Encode + WriteBatch of one block.
  Status Write(const kv::BlockHash& hash, const kv::BlockShape& shape,
               std::span<const std::byte> payload);

  // Reads and verifies blocks, up to queue_depth at a time; one result per request.
  std::vector<ReadResult> ReadBatch(std::span<const ReadRequest> requests);
  // Streaming form: Source(i) gives request i when an io_uring slot is free; Sink(i, result) is
  // called once request i is done, after which its buffer is the caller's again. Source calls for
  // new requests may come before the Sink calls of the requests they replace (the device is kept
  // busy while blocks are verified: up to queue_depth in flight, queue_depth completed and
  // waiting to be verified inline or queued for the verify pool, queue_depth on the pool), so
  // 3 x queue_depth buffers suffice for any n. A request counts in read_queue() from Source to
  // Sink.
  using ReadSource = std::function<ReadRequest(size_t index)>;
  using ReadSink = std::function<void(size_t index, ReadResult&& result)>;
  void ReadStream(size_t n, const ReadSource& source, const ReadSink& sink);

  // True if a file exists under the block's name (not verified: a read may still miss).
  bool Contains(const kv::BlockHash& hash);
  // Removes a block (ENOENT is fine: another process may have removed it).
  Status Remove(const kv::BlockHash& hash);

  StoreStats stats() const;
  // Bytes, tokens and blocks submitted to ReadBatch and not yet completed.
  ReadQueue& read_queue() { return read_queue_; }
  // Whether files are opened with O_DIRECT (false after the kAuto fallback).
  bool direct_io() const { return direct_.load(std::memory_order_relaxed); }
  const std::string& model_dir() const { return model_dir_; }
  const StoreOptions& options() const { return options_; }

 private:
  class EnginePool;
  std::pair<Status, kv::DecodedBlockFile> Verify(const ReadRequest& r, uint64_t done, int fd);
  struct Counters;

  explicit BlockStore(const StoreOptions& options);
  Status Init();
  Status Scan();
  void Quarantine(const kv::BlockHash& hash, int fd, std::string_view reason);
  void LogDirectRefused();
  void IndexInsert(const kv::BlockHash& hash, uint64_t bytes);
  void IndexTouch(const kv::BlockHash& hash, uint64_t bytes);
  void EvictIfNeeded(const kv::BlockHash& protect);
  void ReadStreamImpl(size_t n, const ReadSource& source, const ReadSink& sink, bool preaccounted);
  uint64_t NextSeq() { return seq_.fetch_add(1, std::memory_order_relaxed); }

  StoreOptions options_;
  std::string model_dir_;
  std::string host_;
  // Set at Open; may drop to false once if the first O_DIRECT open is refused (read-only stores
  // cannot probe by creating a file).
  std::atomic<bool> direct_{false};
  std::atomic<uint64_t> seq_{0};
  std::unique_ptr<EnginePool> engines_;
  std::unique_ptr<Counters> counters_;
  ReadQueue read_queue_;
  struct IndexState;
  std::unique_ptr<IndexState> index_;
  std::unique_ptr<internal::VerifyPool> verify_pool_;
};

}  // namespace dualpath::storage
