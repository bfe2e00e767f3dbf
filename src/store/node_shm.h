// ShmTier: a store node's DRAM tier file (<shm_dir>/dualpath-store-<cluster>-<id>) mapped
// MAP_SHARED, from the node's side (Create: make the file, hold it) or a same-host client's side
// (Open: verify that the file is the node's, then map it to read and write replicas with memcpy).
//
// The file (docs/formats/store_tier_file.md) is a 4096-byte header page — magic, version, the
// cluster's name, the node id and the node's incarnation (a random number drawn at each start),
// covered by a checksum — followed by the tier's bytes; data() points past the header, and the
// offsets the master hands out are offsets into that data. The header is what lets a client trust
// a location that a peer (the master's JoinNode answer) supplied: Open maps only a regular file
// at the path the client computes itself from its own shm directory, the cluster and the node id,
// not a symbolic link, owned by the expected user and writable by nobody else, whose header names
// the cluster, node and incarnation the client expects. Anything else is refused with the reason,
// and nothing is written to it.
//
// The node holds an exclusive flock on its file for as long as it lives, so a later start can tell
// a file left by a dead node (no lock: replaced) from one a live node holds (refused). Space is
// reserved with posix_fallocate before the mapping, so a full tmpfs is an error at start and never
// a SIGBUS on a later write.
//
// Ownership: the object owns the descriptor and the mapping (unmapped on destruction); only
// RemoveFile unlinks, and only when the path still names this object's file.
// Thread safety: the mapping's bytes may be used from any thread; the methods are const except
// RemoveFile, which the owner calls once.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dualpath/common/ids.h"
#include "dualpath/common/status.h"

namespace dualpath::store {

inline constexpr uint64_t kTierFileMagic = 0x3152454954535044ULL;  // "DPSTIER1" in LE bytes
inline constexpr uint32_t kTierFileVersion = 1;
inline constexpr uint64_t kTierHeaderBytes = 4096;  // the header page; the data starts here
inline constexpr size_t kTierClusterBytes = 64;     // coord names are 1..64 characters

// The header at offset 0 of a tier file, exactly as it lies in the file (little-endian hosts
// only; the offsets are pinned in node_shm.cc and documented in docs/formats/store_tier_file.md).
struct TierFileHeader {
  uint64_t magic;                   // kTierFileMagic
  uint32_t version;                 // kTierFileVersion
  uint32_t header_bytes;            // kTierHeaderBytes: where the data starts
  char cluster[kTierClusterBytes];  // the store cluster's name, NUL-padded
  uint32_t node_id;                 // the node's id (>= 1)
  uint32_t reserved0;               // 0
  uint64_t incarnation;             // the node process's incarnation (random, nonzero)
  uint64_t data_bytes;              // the tier's capacity: the file holds header + data_bytes
  uint64_t reserved1;               // 0
  uint64_t header_checksum;         // XXH3-64 (seed 0) of the 112 bytes above
};
static_assert(sizeof(TierFileHeader) == 120);

// Whose tier a file is: what the node writes in the header and a client expects there.
struct TierIdentity {
  std::string cluster;
  NodeId node;
  uint64_t incarnation = 0;
};

// What a client expects of a same-host node's tier file before it maps it.
struct TierExpectation {
  std::string shm_dir;  // the client's own tier directory: the file must be its canonical path
  TierIdentity identity;
  uint64_t data_bytes = 0;  // the node's advertised DRAM bytes
  uid_t owner = 0;          // the file's owner (the client's effective uid)
};

class ShmTier {
 public:
  // The node's side: replaces a stale file at `path` (kAlreadyExists when a live node holds it;
  // kFailedPrecondition when it is not a regular file), creates it owner-only with the header
  // page and `bytes` of data reserved, writes the header, locks and maps it.
  static Result<std::unique_ptr<ShmTier>> Create(const std::string& path, uint64_t bytes,
                                                 const TierIdentity& identity);
  // A client's side: verifies the file at `path` against `expect` (see the top of this file;
  // kFailedPrecondition naming what is wrong, or the open error) and maps it.
  static Result<std::unique_ptr<ShmTier>> Open(const std::string& path,
                                               const TierExpectation& expect);
  ~ShmTier();
  ShmTier(const ShmTier&) = delete;
  ShmTier& operator=(const ShmTier&) = delete;

  // The tier's bytes (past the header page) and their count.
  uint8_t* data() const { return map_ + kTierHeaderBytes; }
  uint64_t size() const { return size_; }
  uint64_t incarnation() const { return incarnation_; }
  const std::string& path() const { return path_; }
  // Whether `path` still names the mapped file (false once a new node replaced it or it is gone).
  bool StillAtPath() const;
  // Unlinks the file if `path` still names it.
  Status RemoveFile();

 private:
  ShmTier(std::string path, int fd, uint8_t* map, uint64_t size, uint64_t incarnation);

  std::string path_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;  // the whole file: header page + data
  uint64_t size_ = 0;       // data bytes
  uint64_t incarnation_ = 0;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// The header a node writes for `identity` and `data_bytes` (checksum filled in).
TierFileHeader MakeTierFileHeader(const TierIdentity& identity, uint64_t data_bytes);
// Checks a header read from a file against `expect` (magic, version, checksum, cluster, node,
// incarnation, size); kFailedPrecondition naming the first field that is wrong.
Status CheckTierFileHeader(const TierFileHeader& h, const TierExpectation& expect,
                           const std::string& path);

}  // namespace dualpath::store
