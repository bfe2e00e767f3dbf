#include "dualpath/testbed/read_rate.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dualpath/common/file.h"

namespace dualpath::testbed {
namespace {

struct Sample {
  Nanos t;
  uint64_t file;
  uint64_t link;
};

// Closes a descriptor when the scope ends (-1: nothing).
struct FdGuard {
  explicit FdGuard(int f) : fd(f) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd >= 0) {
      close(fd);
    }
  }
  const int fd;
};

// Reads a decimal counter from sysfs (pread from offset 0 each time: sysfs regenerates it).
Result<uint64_t> ReadCounter(int fd, const std::string& path) {
  char buf[32];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) {
    return IoError(fmt::format("read {}", path), n < 0 ? errno : 0);
  }
  buf[n] = '\0';
  char* end = nullptr;
  const unsigned long long v = std::strtoull(buf, &end, 10);
  if (end == buf) {
    return ParseError(fmt::format("{}: not a number: {}", path, buf));
  }
  return static_cast<uint64_t>(v);
}

}  // namespace

Result<ReadRateResult> MeasureRead(const ReadRateOptions& o, const Clock& clock) {
  if (o.streams < 1) {
    return InvalidArgument("streams must be >= 1");
  }
  if (o.block_bytes == 0 || o.block_bytes % 4096 != 0) {
    return InvalidArgument(
        fmt::format("block size {} must be a positive multiple of 4096", o.block_bytes));
  }
  // Only a regular file: a FIFO would block the open, a device would never reach its end.
  ASSIGN_OR_RETURN(const UniqueFd file, OpenRegularFile(o.path, "file", O_DIRECT));
  const int fd = file.get();
  const FdGuard counter_file{
      o.rx_counter.empty() ? -1 : open(o.rx_counter.c_str(), O_RDONLY | O_CLOEXEC)};
  const int cfd = counter_file.fd;
  if (!o.rx_counter.empty() && cfd < 0) {
    return ErrnoStatus(fmt::format("open counter {}", o.rx_counter), errno);
  }
  const auto counter = [&]() -> Result<uint64_t> {
    return cfd < 0 ? Result<uint64_t>(uint64_t{0}) : ReadCounter(cfd, o.rx_counter);
  };

  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return IoError(fmt::format("fstat {}", o.path), errno);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // Contiguous ranges, one per stream, each a whole number of blocks (the last takes the rest).
  const uint64_t blocks = (size + o.block_bytes - 1) / o.block_bytes;
  const uint64_t streams = std::max<uint64_t>(1, std::min<uint64_t>(o.streams, blocks));
  const uint64_t per_stream = (blocks + streams - 1) / streams * o.block_bytes;

  std::mutex mu;
  std::vector<Sample> samples;  // guarded by mu
  uint64_t done = 0;            // guarded by mu
  Status first_error;           // guarded by mu
  ASSIGN_OR_RETURN(uint64_t link0, counter());
  samples.push_back({clock.Now(), 0, link0});

  const auto reader = [&](uint64_t begin, uint64_t end) {
    // O_DIRECT wants an aligned buffer on most file systems (FUSE does not, but be general).
    std::unique_ptr<char, decltype(&std::free)> buf(
        static_cast<char*>(std::aligned_alloc(4096, o.block_bytes)), &std::free);
    Status st = buf ? Status::Ok() : ResourceExhausted("read buffer");
    for (uint64_t off = begin; st.ok() && off < end;) {
      const ssize_t n = pread(fd, buf.get(), o.block_bytes, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        st = n < 0 ? IoError(fmt::format("pread {} off={}", o.path, off), errno)
                   : IoError(fmt::format("{} shrank while being read (EOF at {})", o.path, off));
        break;
      }
      off += static_cast<uint64_t>(n);
      std::lock_guard<std::mutex> lock(mu);
      Result<uint64_t> link = counter();
      if (!link.ok()) {
        st = link.status();
        break;
      }
      done += static_cast<uint64_t>(n);
      samples.push_back({clock.Now(), done, *link});
    }
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) {
        first_error = st;
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint64_t i = 0; i < streams; ++i) {
    const uint64_t begin = i * per_stream;
    if (begin < size) {
      threads.emplace_back(reader, begin, std::min(size, begin + per_stream));
    }
  }
  for (std::thread& t : threads) {
    t.join();
  }
  RETURN_IF_ERROR(first_error);
  const uint64_t off = done;

  ReadRateResult r;
  r.file_bytes = off;
  r.elapsed = samples.back().t - samples.front().t;
  r.link_bytes = samples.back().link - samples.front().link;
  if (r.elapsed > 0) {
    r.file_bps = static_cast<double>(r.file_bytes) * 8 / ToSeconds(r.elapsed);
    r.link_bps = static_cast<double>(r.link_bytes) * 8 / ToSeconds(r.elapsed);
  }
  // Steady state: from the first sample at >= 10% of the file to the last at <= 90%.
  const Sample* a = nullptr;
  const Sample* b = nullptr;
  for (const Sample& s : samples) {
    if (a == nullptr && s.file * 10 >= r.file_bytes) {
      a = &s;
    }
    if (s.file * 10 <= r.file_bytes * 9) {
      b = &s;
    }
  }
  if (a != nullptr && b != nullptr && b->t > a->t) {
    r.steady_window = b->t - a->t;
    r.steady_link_bps = static_cast<double>(b->link - a->link) * 8 / ToSeconds(r.steady_window);
  }
  return r;
}

}  // namespace dualpath::testbed
