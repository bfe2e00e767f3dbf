#include "store/node_shm.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>
#include <string_view>

#include "dualpath/kv/block_file.h"
#include "dualpath/store/node.h"

namespace dualpath::store {

static_assert(std::endian::native == std::endian::little,
              "tier file headers are little-endian and copied as a struct");
static_assert(offsetof(TierFileHeader, version) == 8);
static_assert(offsetof(TierFileHeader, header_bytes) == 12);
static_assert(offsetof(TierFileHeader, cluster) == 16);
static_assert(offsetof(TierFileHeader, node_id) == 80);
static_assert(offsetof(TierFileHeader, reserved0) == 84);
static_assert(offsetof(TierFileHeader, incarnation) == 88);
static_assert(offsetof(TierFileHeader, data_bytes) == 96);
static_assert(offsetof(TierFileHeader, reserved1) == 104);
static_assert(offsetof(TierFileHeader, header_checksum) == 112);
static_assert(sizeof(TierFileHeader) <= kTierHeaderBytes);

namespace {

uint64_t HeaderChecksum(const TierFileHeader& h) {
  return kv::BlockChecksum(std::as_bytes(
      std::span(reinterpret_cast<const char*>(&h), offsetof(TierFileHeader, header_checksum))));
}

std::string_view ClusterOf(const TierFileHeader& h) {
  return std::string_view(h.cluster, strnlen(h.cluster, sizeof(h.cluster)));
}

// Tiers up to this size are mapped with MAP_POPULATE (below).
constexpr uint64_t kPopulateMaxBytes = 16ull << 30;

// MAP_POPULATE: the file's pages exist already (posix_fallocate, by the node), and mapping them
// all at open costs one pass over the page tables (0.29 CPU-s for 2 GiB on the development VM)
// instead of a minor fault on the first touch of each 4 KiB page in the data path (1.09 CPU-s
// for the same 2 GiB: ~34 ms of faults in the first 64 MiB batch through a fresh mapping, more
// than the batch's copy; issue 27). Larger tiers are mapped lazily, so that opening one (a
// client does it inside its first batch call) stays bounded: ~2.3 CPU-s at the limit.
Result<uint8_t*> MapShared(int fd, uint64_t bytes, const std::string& path) {
  const int populate = bytes <= kPopulateMaxBytes ? MAP_POPULATE : 0;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | populate, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(fmt::format("mmap {} ({} bytes)", path, bytes), errno);
  return static_cast<uint8_t*>(p);
}

}  // namespace

TierFileHeader MakeTierFileHeader(const TierIdentity& identity, uint64_t data_bytes) {
  TierFileHeader h{};
  h.magic = kTierFileMagic;
  h.version = kTierFileVersion;
  h.header_bytes = static_cast<uint32_t>(kTierHeaderBytes);
  std::memcpy(h.cluster, identity.cluster.data(),
              std::min(identity.cluster.size(), sizeof(h.cluster)));
  h.node_id = identity.node.value();
  h.incarnation = identity.incarnation;
  h.data_bytes = data_bytes;
  h.header_checksum = HeaderChecksum(h);
  return h;
}

Status CheckTierFileHeader(const TierFileHeader& h, const TierExpectation& expect,
                           const std::string& path) {
  auto refuse = [&](std::string why) {
    return FailedPrecondition(fmt::format("store tier file {}: {}", path, why));
  };
  if (h.magic != kTierFileMagic) return refuse("no tier file header (bad magic)");
  if (h.version != kTierFileVersion) {
    return refuse(fmt::format("version {}, this build reads {}", h.version, kTierFileVersion));
  }
  if (h.header_checksum != HeaderChecksum(h) || h.header_bytes != kTierHeaderBytes) {
    return refuse("header checksum or header size wrong");
  }
  const TierIdentity& id = expect.identity;
  if (ClusterOf(h) != id.cluster) {
    return refuse(fmt::format("belongs to cluster '{}', not '{}'", ClusterOf(h), id.cluster));
  }
  if (h.node_id != id.node.value()) {
    return refuse(fmt::format("belongs to node {}, not {}", h.node_id, id.node.value()));
  }
  if (h.incarnation != id.incarnation) {
    return refuse(fmt::format("holds incarnation {:016x} of node {}, the master names {:016x}",
                              h.incarnation, h.node_id, id.incarnation));
  }
  if (h.data_bytes < expect.data_bytes) {
    return refuse(fmt::format("holds {} data bytes, the node advertises {}", h.data_bytes,
                              expect.data_bytes));
  }
  return Status::Ok();
}

ShmTier::ShmTier(std::string path, int fd, uint8_t* map, uint64_t size, uint64_t incarnation)
    : path_(std::move(path)), fd_(fd), map_(map), size_(size), incarnation_(incarnation) {
  struct stat st {};
  if (::fstat(fd_, &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
}

ShmTier::~ShmTier() {
  if (map_ != nullptr) ::munmap(map_, kTierHeaderBytes + size_);
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

Result<std::unique_ptr<ShmTier>> ShmTier::Create(const std::string& path, uint64_t bytes,
                                                 const TierIdentity& identity) {
  if (bytes == 0) return InvalidArgument(fmt::format("store tier file {}: size 0", path));
  if (bytes > UINT64_MAX / 2) {
    return InvalidArgument(fmt::format("store tier file {}: size {} is too large", path, bytes));
  }
  if (identity.incarnation == 0 || identity.cluster.empty() ||
      identity.cluster.size() > kTierClusterBytes) {
    return InvalidArgument(fmt::format(
        "store tier file {}: needs a nonzero incarnation and a cluster name of 1..{} characters",
        path, kTierClusterBytes));
  }
  const uint64_t file_bytes = kTierHeaderBytes + bytes;
  // A file left at the path: a dead node's (replace it) or a live node's (refuse).
  int old = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (old >= 0) {
    struct stat st {};
    if (::fstat(old, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(old);
      return FailedPrecondition(
          fmt::format("store tier file {} exists and is not a regular file", path));
    }
    if (::flock(old, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(old);
      if (e == EWOULDBLOCK) {
        return AlreadyExists(fmt::format(
            "store tier file {} is held by a live store node (same cluster and id)", path));
      }
      return ErrnoStatus(fmt::format("flock {}", path), e);
    }
    // Stale: no node holds it. Unlink while holding its lock, so no second starter takes it too.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int e = errno;
      ::close(old);
      return ErrnoStatus(fmt::format("remove stale store tier file {}", path), e);
    }
    ::close(old);
  } else if (errno == ELOOP) {
    return FailedPrecondition(fmt::format("store tier file {} is a symbolic link", path));
  } else if (errno != ENOENT) {
    return ErrnoStatus(fmt::format("open {}", path), errno);
  }

  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus(fmt::format("create store tier file {}", path), errno);
  auto fail = [&](Status s) {
    ::unlink(path.c_str());
    ::close(fd);
    return s;
  };
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return fail(ErrnoStatus(fmt::format("flock {}", path), errno));
  }
  if (int e = ::posix_fallocate(fd, 0, static_cast<off_t>(file_bytes)); e != 0) {
    return fail(
        ErrnoStatus(fmt::format("reserve {} bytes for store tier file {}", file_bytes, path), e));
  }
  Result<uint8_t*> map = MapShared(fd, file_bytes, path);
  if (!map.ok()) return fail(map.status());
  // The header goes in before any client can learn the file's incarnation (the node joins the
  // master only after Start returned).
  const TierFileHeader header = MakeTierFileHeader(identity, bytes);
  std::memcpy(*map, &header, sizeof(header));
  return std::unique_ptr<ShmTier>(new ShmTier(path, fd, *map, bytes, identity.incarnation));
}

Result<std::unique_ptr<ShmTier>> ShmTier::Open(const std::string& path,
                                               const TierExpectation& expect) {
  auto refuse = [&](std::string why) {
    return FailedPrecondition(fmt::format("store tier file {}: {}", path, why));
  };
  // The path a peer supplied must be the one this client would name itself: its own directory,
  // the cluster and the node id (no other file, no "..", no other directory).
  namespace fs = std::filesystem;
  const fs::path want =
      fs::path(StoreNode::ShmPath(expect.shm_dir, expect.identity.cluster, expect.identity.node))
          .lexically_normal();
  if (expect.shm_dir.empty() || fs::path(path).lexically_normal() != want) {
    return refuse(fmt::format("is not this client's path for node {} ({})",
                              expect.identity.node.value(), want.string()));
  }
  if (expect.data_bytes == 0 || expect.data_bytes > UINT64_MAX / 2) {
    return refuse(fmt::format("the node advertises {} bytes", expect.data_bytes));
  }
  // O_NOFOLLOW: a symbolic link fails with ELOOP; O_NONBLOCK: a FIFO cannot hold the open up.
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) return refuse("is a symbolic link");
    if (errno == EISDIR) return refuse("is not a regular file");
    return ErrnoStatus(fmt::format("open store tier file {}", path), errno);
  }
  auto fail = [&](Status s) {
    ::close(fd);
    return s;
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(ErrnoStatus(fmt::format("fstat {}", path), errno));
  if (!S_ISREG(st.st_mode)) return fail(refuse("is not a regular file"));
  if (st.st_uid != expect.owner) {
    return fail(refuse(fmt::format("is owned by uid {}, not {}", st.st_uid, expect.owner)));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fail(
        refuse(fmt::format("is writable by group or others (mode {:o})", st.st_mode & 07777)));
  }
  const uint64_t file_bytes = kTierHeaderBytes + expect.data_bytes;
  if (static_cast<uint64_t>(st.st_size) < file_bytes) {
    return fail(refuse(fmt::format("has {} bytes, the node advertises {} + the {}-byte header",
                                   st.st_size, expect.data_bytes, kTierHeaderBytes)));
  }
  TierFileHeader h{};
  const ssize_t got = ::pread(fd, &h, sizeof(h), 0);
  if (got != static_cast<ssize_t>(sizeof(h))) {
    return fail(got < 0 ? ErrnoStatus(fmt::format("read the header of {}", path), errno)
                        : refuse("short header"));
  }
  if (Status s = CheckTierFileHeader(h, expect, path); !s.ok()) return fail(s);
  Result<uint8_t*> map = MapShared(fd, file_bytes, path);
  if (!map.ok()) return fail(map.status());
  return std::unique_ptr<ShmTier>(
      new ShmTier(path, fd, *map, expect.data_bytes, expect.identity.incarnation));
}

bool ShmTier::StillAtPath() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;
  return st.st_dev == dev_ && st.st_ino == ino_;
}

Status ShmTier::RemoveFile() {
  if (!StillAtPath()) return Status::Ok();
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(fmt::format("remove store tier file {}", path_), errno);
  }
  return Status::Ok();
}

}  // namespace dualpath::store
