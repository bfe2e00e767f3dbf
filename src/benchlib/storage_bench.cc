#include "dualpath/benchlib/storage_bench.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dualpath/common/check.h"
#include "dualpath/common/clock.h"
#include "dualpath/common/log.h"
#include "dualpath/common/numeric.h"
#include "dualpath/common/splitmix.h"
#include "dualpath/common/stop_signal.h"
#include "dualpath/storage/layout.h"

namespace dualpath::storage {
namespace {

// splitmix64: cheap, well-mixed; the benchmark names thousands of blocks per second and a
// Mersenne Twister seeding per name showed up in profiles.
kv::BlockHash BenchHash(uint64_t salt, uint64_t i) {
  kv::BlockHash h;
  SplitMix64 stream(salt ^ (i * 0xD6E8FEB86659FD93ull));
  for (size_t k = 0; k < h.bytes.size(); k += 8) {
    uint64_t v = stream.Next();
    std::memcpy(&h.bytes[k], &v, 8);
  }
  return h;
}

// Input ranges (docs/storage.md): up to 16 Mi files (16 TiB of 1 MiB blocks), blocks up to
// 256 MiB, and at most 16 GiB of buffers.
constexpr uint64_t kMaxFiles = uint64_t{1} << 24;
constexpr uint64_t kMaxBlockBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxBufferBytes = uint64_t{16} << 30;

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// What one benchmark run made on disk, so that it removes exactly that and nothing else: the
// block files whose publishing rename this run performed (BlockStore::WriteStream's `created`),
// and the directories that did not exist before the run. A block that was already there (kept
// by an earlier --keep run, or any file of a real store that happens to share the model
// directory) is never removed, and a directory is removed with rmdir only, so one that holds
// anything else stays.
class RunFootprint {
 public:
  // Records which of `dir`'s ancestors and itself are missing now (to be made by the store).
  void NoteDirChain(const std::string& dir) {
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
      if (pos == dir.size() || dir[pos] == '/') {
        NoteDir(dir.substr(0, pos));
      }
    }
  }
  // Records whether `dir` exists now (first sighting only): a missing one is ours once made.
  void NoteDir(const std::string& dir) {
    if (seen_.insert(dir).second && !IsDir(dir)) {
      ours_.push_back(dir);
    }
  }
  explicit RunFootprint(size_t files) : created_(files) {}
  // Block i's file was created by this run (one bit per file: memory bounded by --files).
  void NoteBlock(size_t i) { created_[i] = true; }

  // Removes the block files this run created, then the directories it made, deepest first.
  void Remove(const std::string& model_dir, uint64_t salt) {
    for (size_t i = 0; i < created_.size(); ++i) {
      if (!created_[i]) {
        continue;
      }
      const std::string path = BlockPath(model_dir, BenchHash(salt, i));
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        log::Warn("bench storage: remove {}: {}", path, std::strerror(errno));
      }
    }
    created_.clear();
    // Deeper paths are longer: children before their parents.
    std::sort(ours_.begin(), ours_.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (const std::string& dir : ours_) {
      ::rmdir(dir.c_str());  // ENOTEMPTY: someone else's files are in it; it stays
    }
    ours_.clear();
  }

 private:
  std::set<std::string> seen_;
  std::vector<std::string> ours_;
  std::vector<bool> created_;
};

double ProcessCpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

}  // namespace

Result<StorageBenchReport> RunStorageBench(const StorageBenchOptions& o) {
  if (o.dir.empty()) {
    return InvalidArgument("--dir is required");
  }
  if (o.block_bytes < 2 * kIoAlign || o.block_bytes % kIoAlign != 0) {
    return InvalidArgument("--block-bytes " + std::to_string(o.block_bytes) +
                           " must be a multiple of 4096 and at least 8192 (the file includes a "
                           "4096-byte header)");
  }
  RETURN_IF_ERROR(CheckCountRange("--queue-depth", o.queue_depth, 1, 4096, ""));
  RETURN_IF_ERROR(CheckCountRange("--files", o.files, 1, kMaxFiles, "files"));
  RETURN_IF_ERROR(CheckCountRange("--block-bytes", o.block_bytes, 8192, kMaxBlockBytes, "bytes"));
  // The benchmark holds 6 x queue_depth blocks in memory (3 x queue_depth file images and as
  // many read buffers).
  if (6 * uint64_t{o.queue_depth} * o.block_bytes > kMaxBufferBytes) {
    return InvalidArgument("--queue-depth " + std::to_string(o.queue_depth) + " x --block-bytes " +
                           std::to_string(o.block_bytes) + ": 6 x their product is over " +
                           std::to_string(kMaxBufferBytes >> 30) + " GiB of buffers");
  }
  // A fresh model directory per run (random fingerprint), so no earlier run's files dedupe
  // this run's writes.
  if (o.read_only && o.fingerprint == 0) {
    return InvalidArgument("--read-only needs --fingerprint of a set kept by an earlier run");
  }
  std::random_device rd;
  const uint64_t fingerprint =
      o.fingerprint != 0 ? o.fingerprint : (uint64_t{rd()} << 32) ^ rd() ^ o.seed;
  const std::string model_dir = BlockStore::ModelDir(o.dir, fingerprint);
  if (o.read_only && !IsDir(model_dir)) {
    return InvalidArgument("--read-only --fingerprint: no kept set at " + model_dir +
                           " (run once with --keep first)");
  }
  // Everything this run makes is removed when it ends (also when it fails, --keep or not: a
  // partial set cannot be re-read), unless it succeeds with --keep. --read-only makes nothing.
  RunFootprint footprint(static_cast<size_t>(o.files));
  footprint.NoteDirChain(model_dir + "/" + std::string(kQuarantineDir));
  struct Cleanup {
    RunFootprint& footprint;
    const std::string& model_dir;
    uint64_t salt;
    bool remove = true;
    ~Cleanup() {
      if (remove) {
        footprint.Remove(model_dir, salt);
      }
    }
  } cleanup{footprint, model_dir, fingerprint, !o.read_only};
  StoreOptions so;
  so.root = o.dir;
  so.model_fingerprint = fingerprint;
  so.io_mode = o.io_mode;
  so.sync = o.sync;
  so.queue_depth = o.queue_depth;
  so.verify_threads = o.verify_threads;
  so.scan_on_open = false;  // nothing to index; and a benchmark removes nothing it did not make
  so.read_only = o.read_only;
  ASSIGN_OR_RETURN(auto store, BlockStore::Open(so));

  const uint64_t payload_bytes = o.block_bytes - kv::kBlockFileHeaderBytes;
  const kv::BlockShape shape{1, 1, payload_bytes};
  std::vector<std::byte> payload(payload_bytes);
  std::mt19937_64 rng(o.seed);
  for (auto& b : payload) {
    b = static_cast<std::byte>(rng());
  }
  const uint64_t checksum = kv::BlockChecksum(payload);

  // 3 x queue_depth file images / read buffers (the bound ReadStream and WriteStream document),
  // recycled through Source and Sink: any number of files streams through a fixed amount of
  // memory. The payload is copied once per buffer; only the 4 KiB header changes per file.
  const size_t nbuf = 3 * size_t{o.queue_depth};
  std::vector<EncodedBlock> images(nbuf);
  std::vector<size_t> free_bufs;
  for (size_t k = 0; k < nbuf; ++k) {
    images[k].file = AlignedBuffer(o.block_bytes);
    images[k].file_bytes = o.block_bytes;
    std::memcpy(images[k].file.data() + kv::kBlockFileHeaderBytes, payload.data(), payload_bytes);
    free_bufs.push_back(k);
  }
  std::vector<size_t> buf_of(o.files);
  const uint64_t salt = fingerprint;
  Status first_error;

  // The streams run in slices so that SIGINT/SIGTERM (stop_signal.h, installed by the CLI) stop
  // the run between two slices; the Cleanup above then removes what the run created, as for any
  // failure. A slice is many times the queue depth, so draining the queue between slices costs
  // nothing measurable.
  constexpr size_t kSlice = 4096;
  SteadyClock& clock = SteadyClock::Default();
  const Nanos w0 = clock.Now();
  const size_t write_count = o.read_only ? 0 : static_cast<size_t>(o.files);
  for (size_t base = 0; base < write_count && first_error.ok(); base += kSlice) {
    RETURN_IF_ERROR(CheckStop());
    store->WriteStream(
        std::min(kSlice, write_count - base),
        [&](size_t j) -> const EncodedBlock& {
          const size_t i = base + j;
          DUALPATH_CHECK(!free_bufs.empty(), "bench: no free write buffer");
          size_t k = free_bufs.back();
          free_bufs.pop_back();
          buf_of[i] = k;
          EncodedBlock& img = images[k];
          img.hash = BenchHash(salt, i);
          // The fan-out directories this block's write may make (before the write makes them).
          const std::string dir = BlockDir(model_dir, img.hash);
          footprint.NoteDir(dir.substr(0, dir.rfind('/')));
          footprint.NoteDir(dir);
          kv::BlockFileMeta meta{fingerprint, img.hash, shape.tokens, shape.num_layers,
                                 shape.bytes_per_token_per_layer};
          Status st = kv::EncodeBlockFileHeader(meta, checksum,
                                                img.file.span().first(kv::kBlockFileHeaderBytes));
          DUALPATH_CHECK(st.ok(), st.ToString());
          return img;
        },
        [&](size_t j, Status st, bool created) {
          const size_t i = base + j;
          free_bufs.push_back(buf_of[i]);
          if (created) {
            footprint.NoteBlock(i);
          }
          if (!st.ok() && first_error.ok()) {
            first_error = st.WithContext("bench write");
          }
        });
  }
  const Nanos w1 = clock.Now();
  RETURN_IF_ERROR(first_error);

  std::vector<AlignedBuffer> bufs;
  for (size_t k = 0; k < nbuf; ++k) {
    bufs.emplace_back(o.block_bytes);
  }
  uint64_t verified = 0;
  const double cpu0 = ProcessCpuSeconds();
  const Nanos r0 = clock.Now();
  for (size_t base = 0; base < static_cast<size_t>(o.files) && first_error.ok(); base += kSlice) {
    RETURN_IF_ERROR(CheckStop());
    store->ReadStream(
        std::min<size_t>(kSlice, static_cast<size_t>(o.files) - base),
        [&](size_t j) {
          const size_t i = base + j;
          DUALPATH_CHECK(!free_bufs.empty(), "bench: no free read buffer");
          size_t k = free_bufs.back();
          free_bufs.pop_back();
          buf_of[i] = k;
          return ReadRequest{BenchHash(salt, i), bufs[k].span(), 64};
        },
        [&](size_t j, ReadResult&& r) {
          const size_t i = base + j;
          free_bufs.push_back(buf_of[i]);
          if (r.status.ok()) {
            ++verified;
          } else if (first_error.ok()) {
            first_error = r.status.WithContext("bench read");
          }
        });
  }
  const Nanos r1 = clock.Now();
  const double cpu1 = ProcessCpuSeconds();
  RETURN_IF_ERROR(first_error);
  DUALPATH_CHECK(verified == o.files, "bench: verified count mismatch");

  StorageBenchReport report;
  const double total = static_cast<double>(o.block_bytes) * static_cast<double>(o.files);
  report.write_seconds = ToSeconds(w1 - w0);
  report.read_seconds = ToSeconds(r1 - r0);
  report.write_gbps = o.read_only ? 0 : total / report.write_seconds / 1e9;
  report.read_cpu_seconds = cpu1 - cpu0;
  report.fingerprint = fingerprint;
  report.read_gbps = total / report.read_seconds / 1e9;
  report.direct_io = store->direct_io();
  report.model_dir = store->model_dir();
  store.reset();
  cleanup.remove = !o.read_only && !o.keep;
  return report;
}

}  // namespace dualpath::storage
