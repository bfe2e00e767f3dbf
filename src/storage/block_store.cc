// BlockStore lifecycle, index and eviction, quarantine, statistics.
#include "dualpath/storage/block_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "dualpath/common/log.h"
#include "dualpath/storage/layout.h"
#include "storage/store_internal.h"
#include "storage/verify_pool.h"

namespace dualpath::storage {

using internal::ShortHex;

namespace internal {

Status MakeDirs(const std::string& path) {
  if (path.empty()) {
    return InvalidArgument("empty directory path");
  }
  // Walk the components left to right; most calls find everything but the last level present.
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') {
      continue;
    }
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), kStoreDirMode) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir " + prefix, errno);
    }
  }
  return Status::Ok();
}

}  // namespace internal

Result<std::unique_ptr<internal::UringEngine>> BlockStore::EnginePool::Acquire() {
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      auto engine = std::move(free_.back());
      free_.pop_back();
      return engine;
    }
  }
  return internal::UringEngine::Create(depth_);
}

void BlockStore::EnginePool::Release(std::unique_ptr<internal::UringEngine> engine) {
  std::lock_guard lock(mu_);
  free_.push_back(std::move(engine));
}

BlockStore::BlockStore(const StoreOptions& options)
    : options_(options),
      engines_(std::make_unique<EnginePool>(options.queue_depth)),
      counters_(std::make_unique<Counters>()),
      index_(std::make_unique<IndexState>()) {}

BlockStore::~BlockStore() = default;

Result<std::unique_ptr<BlockStore>> BlockStore::Open(const StoreOptions& options) {
  if (options.root.empty()) {
    return InvalidArgument("storage root is empty");
  }
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    return InvalidArgument("storage queue_depth " + std::to_string(options.queue_depth) +
                           " out of range [1, 4096]");
  }
  if (options.verify_threads > 64) {
    return InvalidArgument("storage verify_threads " + std::to_string(options.verify_threads) +
                           " out of range [0, 64]");
  }
  std::unique_ptr<BlockStore> store(new BlockStore(options));
  RETURN_IF_ERROR(store->Init());
  if (options.verify_threads > 0) {
    store->verify_pool_ = std::make_unique<internal::VerifyPool>(options.verify_threads);
  }
  return store;
}

std::string BlockStore::ModelDir(const std::string& root, uint64_t model_fingerprint) {
  char fp[17];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(model_fingerprint));
  std::string trimmed = root;
  while (trimmed.size() > 1 && trimmed.back() == '/') {
    trimmed.pop_back();
  }
  return trimmed + "/" + fp;
}

Status BlockStore::Init() {
  model_dir_ = ModelDir(options_.root, options_.model_fingerprint);
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "unknown");
  }
  // Dots separate the fields of a temporary file's name; keep the host name free of them.
  host_ = host;
  for (char& c : host_) {
    if (c == '.' || c == '/') {
      c = '_';
    }
  }
  if (options_.read_only) {
    // Change nothing: not even the directories or the O_DIRECT probe file (the first read
    // decides, see ReadStreamImpl).
    struct stat st {};
    if (::stat(model_dir_.c_str(), &st) != 0) {
      return ErrnoStatus("open store root=" + options_.root + " read-only: " + model_dir_, errno);
    }
    if (!S_ISDIR(st.st_mode)) {
      return InvalidArgument("open store root=" + options_.root + " read-only: " + model_dir_ +
                             " is not a directory");
    }
    direct_.store(options_.io_mode != IoMode::kBuffered, std::memory_order_relaxed);
    if (options_.scan_on_open) {
      RETURN_IF_ERROR(Scan());
    }
    return Status::Ok();
  }
  Status made = internal::MakeDirs(model_dir_ + "/" + std::string(kQuarantineDir));
  if (!made.ok()) {
    // A directory this process may read but not write (another user's store, a read-only mount):
    // serve reads; writes will fail with a clear kPermissionDenied naming the file.
    if (::access(model_dir_.c_str(), R_OK | X_OK) != 0) {
      return made.WithContext("open store root=" + options_.root);
    }
    log::Info("storage: {} is not writable by this process ({}); serving reads only", model_dir_,
              made.message());
  }

  // Probe O_DIRECT once: tmpfs and some FUSE setups refuse it with EINVAL at open.
  if (options_.io_mode != IoMode::kBuffered) {
    bool direct = false;
    int err = 0;
    if (made.ok()) {
      // A name of its own per open (pid and a counter): two stores opened by one process must
      // not find each other's probe (that is EEXIST below, which defers the decision).
      static std::atomic<uint64_t> probes{0};
      std::string probe = model_dir_ + "/.probe." + host_ + "." + std::to_string(::getpid()) + "." +
                          std::to_string(probes.fetch_add(1, std::memory_order_relaxed));
      // O_EXCL: the probe is always a new file of ours; a name already there (planted in a shared
      // directory, a symlink included) is neither followed nor removed, and the first read
      // decides instead, as when files cannot be created here.
      int fd =
          ::open(probe.c_str(), O_CREAT | O_EXCL | O_RDWR | O_DIRECT | O_CLOEXEC, kStoreFileMode);
      err = errno;
      if (fd >= 0) {
        ::close(fd);
        ::unlink(probe.c_str());
        direct = true;
      } else if (err == EINVAL) {
        // O_DIRECT refused (ramfs, tmpfs): the kernel may have created the file before refusing
        // the flag. O_EXCL means no file was there before this call, so it is ours to remove.
        ::unlink(probe.c_str());
      } else if (err == EACCES || err == EPERM || err == EROFS || err == EEXIST) {
        // Cannot create files here: decide at the first read instead (see ReadStreamImpl).
        direct = true;
      }
    } else {
      direct = true;  // read-only store: the first read decides
    }
    if (!direct) {
      if (options_.io_mode == IoMode::kDirect) {
        return ErrnoStatus("open store root=" + options_.root + ": O_DIRECT refused", err);
      }
      if (err != EINVAL) {
        return ErrnoStatus("open store root=" + options_.root + ": probe file", err);
      }
      LogDirectRefused();
    }
    direct_.store(direct, std::memory_order_relaxed);
  }
  if (options_.scan_on_open) {
    RETURN_IF_ERROR(Scan());
  }
  log::Debug("storage: opened {} direct={} blocks={}", model_dir_, direct_io(), index_->lru.size());
  return Status::Ok();
}

void BlockStore::LogDirectRefused() {
  log::Info(
      "storage: O_DIRECT refused by the file system at {} (EINVAL); using buffered I/O with "
      "posix_fadvise(DONTNEED)",
      model_dir_);
}

void BlockStore::IndexInsert(const kv::BlockHash& hash, uint64_t bytes) {
  {
    std::lock_guard lock(index_->mu);
    index_->lru.Insert(hash, bytes);
  }
  EvictIfNeeded(hash);
}

void BlockStore::IndexTouch(const kv::BlockHash& hash, uint64_t bytes) {
  bool known;
  {
    std::lock_guard lock(index_->mu);
    known = index_->lru.Touch(hash);
    if (!known) {
      // Published by another process or node: it now counts against this store's capacity too.
      index_->lru.Insert(hash, bytes);
    }
  }
  if (!known) {
    EvictIfNeeded(hash);
  }
}

void BlockStore::EvictIfNeeded(const kv::BlockHash& protect) {
  if (options_.capacity_bytes == 0 || options_.read_only) {
    return;
  }
  std::vector<kv::BlockHash> victims;
  {
    std::lock_guard lock(index_->mu);
    victims = index_->lru.Victims(options_.capacity_bytes, 0, protect);
    for (const kv::BlockHash& v : victims) {
      index_->lru.Erase(v);
    }
  }
  // Unlink outside the lock: on a network file system each unlink is a round trip. A reader that
  // already opened the file keeps reading it (POSIX unlink semantics); later readers miss.
  for (const kv::BlockHash& v : victims) {
    std::string path = BlockPath(model_dir_, v);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      log::Warn("storage: evict {}: unlink failed: {}", path, std::strerror(errno));
      continue;
    }
    counters_->evictions.fetch_add(1, std::memory_order_relaxed);
  }
}

void BlockStore::Quarantine(const kv::BlockHash& hash, int fd, std::string_view reason) {
  // Move the bad file aside rather than delete it (an operator may want to look at it), but only
  // if the name still refers to the file we read: a writer may have republished a good copy since.
  std::string path = BlockPath(model_dir_, hash);
  struct stat ours {};
  struct stat now {};
  if (::fstat(fd, &ours) != 0 || ::stat(path.c_str(), &now) != 0 || ours.st_ino != now.st_ino ||
      ours.st_dev != now.st_dev) {
    return;
  }
  if (options_.read_only) {
    // Leave the file where it is (the read is still a miss): a read-only store changes nothing.
    std::lock_guard lock(index_->mu);
    index_->lru.Erase(hash);
    return;
  }
  std::string dest = model_dir_ + "/" + std::string(kQuarantineDir) + "/" + hash.Hex() + "." +
                     std::string(reason) + "." + host_ + "." + std::to_string(::getpid()) + "." +
                     std::to_string(NextSeq());
  if (::rename(path.c_str(), dest.c_str()) != 0 && errno != ENOENT) {
    // Could not move it (e.g. read-only directory): the read is still a miss, every time.
    log::Warn("storage: quarantine {}: rename failed: {}", path, std::strerror(errno));
  }
  std::lock_guard lock(index_->mu);
  index_->lru.Erase(hash);
}

bool BlockStore::Contains(const kv::BlockHash& hash) {
  std::string path = BlockPath(model_dir_, hash);
  return ::access(path.c_str(), F_OK) == 0;
}

Status BlockStore::Remove(const kv::BlockHash& hash) {
  if (options_.read_only) {
    return FailedPrecondition("remove block=" + ShortHex(hash) + ": store " + model_dir_ +
                              " was opened read-only");
  }
  std::string path = BlockPath(model_dir_, hash);
  {
    std::lock_guard lock(index_->mu);
    index_->lru.Erase(hash);
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("unlink block=" + ShortHex(hash), errno);
  }
  return Status::Ok();
}

StoreStats BlockStore::stats() const {
  const Counters& c = *counters_;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  StoreStats s;
  s.reads = get(c.reads);
  s.hits = get(c.hits);
  s.misses = get(c.misses);
  s.corrupt = get(c.corrupt);
  s.read_errors = get(c.read_errors);
  s.writes = get(c.writes);
  s.write_dedup = get(c.write_dedup);
  s.write_errors = get(c.write_errors);
  s.evictions = get(c.evictions);
  s.tmp_cleaned = get(c.tmp_cleaned);
  s.bytes_read = get(c.bytes_read);
  s.bytes_written = get(c.bytes_written);
  std::lock_guard lock(index_->mu);
  s.indexed_blocks = index_->lru.size();
  s.indexed_bytes = index_->lru.total_bytes();
  return s;
}

}  // namespace dualpath::storage
