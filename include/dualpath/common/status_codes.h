// The one table of dualpath error codes.
//
// Each component owns a range of 100 codes (3FS style) so a code alone says where an error came
// from. Add new codes at the end of the component's range; never renumber (codes appear in logs,
// JSON output and the C ABI).
//
//   0        OK
//   1-99     common (generic conditions any component may use)
//   100-199  kv          200-299  storage     300-399  pool      400-499  transfer
//   500-599  sched       600-699  sim         700-799  trace     800-899  engine
//   900-999  control     1000-1099 testbed    1100-1199 cli     1200-1299 model
//   1300-1399 replay    1400-1499 store
//   1500-1599 coord
#pragma once

// X(name, value, description)
#define DUALPATH_STATUS_CODES(X)                                                 \
  X(kOk, 0, "ok")                                                                \
  /* common */                                                                   \
  X(kInvalidArgument, 1, "invalid argument")                                     \
  X(kNotFound, 2, "not found")                                                   \
  X(kAlreadyExists, 3, "already exists")                                         \
  X(kOutOfRange, 4, "out of range")                                              \
  X(kIoError, 5, "I/O error")                                                    \
  X(kCorruption, 6, "corruption")                                                \
  X(kResourceExhausted, 7, "resource exhausted")                                 \
  X(kTimeout, 8, "timed out")                                                    \
  X(kUnavailable, 9, "unavailable")                                              \
  X(kPermissionDenied, 10, "permission denied")                                  \
  X(kFailedPrecondition, 11, "failed precondition")                              \
  X(kUnimplemented, 12, "unimplemented")                                         \
  X(kInternal, 13, "internal error")                                             \
  X(kCancelled, 14, "cancelled")                                                 \
  X(kParseError, 15, "parse error")                                              \
  /* kv */                                                                       \
  X(kKvBadMagic, 100, "block file: bad magic")                                   \
  X(kKvBadVersion, 101, "block file: unsupported version")                       \
  X(kKvChecksumMismatch, 102, "block file: payload checksum mismatch")           \
  X(kKvTruncated, 103, "block file: truncated")                                  \
  X(kKvFingerprintMismatch, 104, "block file: model fingerprint mismatch")       \
  X(kKvHashMismatch, 105, "block file: block hash mismatch")                     \
  X(kKvBadHeader, 106, "block file: inconsistent header")                        \
  X(kKvUnknownModel, 107, "unknown model")                                       \
  X(kKvBadToken, 108, "bad token id")                                            \
  /* storage */                                                                  \
  X(kStorageMiss, 200, "storage: block not present")                             \
  X(kStorageNoSpace, 201, "storage: no space left")                              \
  X(kStorageQueueFull, 202, "storage: write-behind queue full")                  \
  X(kStorageClosed, 203, "storage: store closed")                                \
  /* pool */                                                                     \
  X(kPoolBadMagic, 300, "pool: region has bad magic")                            \
  X(kPoolBadVersion, 301, "pool: region has unsupported version")                \
  X(kPoolTooSmall, 302, "pool: region too small")                                \
  X(kPoolFull, 303, "pool: no free space")                                       \
  X(kPoolPinned, 304, "pool: entry is pinned")                                   \
  X(kPoolIndexFull, 305, "pool: index full")                                     \
  /* transfer */                                                                 \
  X(kTransferPeerDead, 400, "transfer: peer unreachable or dead")                \
  X(kTransferBadRkey, 401, "transfer: bad remote key")                           \
  X(kTransferBadDescriptor, 402, "transfer: descriptor out of registered range") \
  X(kTransferUcxError, 403, "transfer: UCX error")                               \
  /* sched */                                                                    \
  X(kSchedNoEngine, 500, "sched: no eligible engine")                            \
  X(kSchedBadConfig, 501, "sched: bad configuration")                            \
  /* sim */                                                                      \
  X(kSimBadConfig, 600, "sim: bad configuration")                                \
  /* trace */                                                                    \
  X(kTraceMalformed, 700, "trace: malformed record")                             \
  /* engine */                                                                   \
  X(kEngineMismatch, 800, "engine: output mismatch")                             \
  X(kEnginePeerFailed, 801, "engine: peer engine failed")                        \
  X(kEngineNoRoom, 802, "engine: request does not fit in engine memory")         \
  X(kEngineStopped, 803, "engine: stopping")                                     \
  /* control */                                                                  \
  X(kControlRpcError, 900, "control: RPC failed")                                \
  /* testbed */                                                                  \
  X(kTestbedNotRoot, 1000, "testbed: needs root")                                \
  X(kTestbedExists, 1001, "testbed: cluster already exists")                     \
  X(kTestbedNotFound, 1002, "testbed: no such cluster")                          \
  X(kTestbedCommandFailed, 1003, "testbed: setup command failed")                \
  /* cli */                                                                      \
  X(kCliUsage, 1100, "usage error")                                              \
  /* store */                                                                    \
  X(kStoreObjectExists, 1400, "store: object already committed")                 \
  X(kStorePutPending, 1401, "store: a put of this object is in progress")        \
  X(kStoreUnknownPut, 1402, "store: no such put in progress")                    \
  X(kStoreUnknownNode, 1403, "store: no such live node")                         \
  X(kStoreNodeExists, 1404, "store: node already live")                          \
  X(kStoreNotEnoughNodes, 1405, "store: fewer live nodes than replicas")         \
  X(kStoreNoSpace, 1406, "store: no space on enough nodes")                      \
  X(kStoreUnknownPin, 1407, "store: no such pin")                                \
  X(kStoreReportConflict, 1408, "store: node report conflicts with metadata")    \
  /* coord */                                                                    \
  X(kCoordLeaseLost, 1500, "coord: etcd lease expired or revoked")               \
  X(kCoordCompacted, 1501, "coord: etcd revision compacted")                     \
  X(kCoordNotLeader, 1502, "coord: not the leader")
