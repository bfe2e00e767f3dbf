// StorageFaults: fault points on the storage data path (3FS FAULT_INJECTION_POINT style), so
// tests can make a read fail, a write come up short, or a writer stop right before it publishes.
//
// A BlockStore calls the hooks of the StorageFaults object given in its options (none by default:
// production code pays one null-pointer test per block). The default implementation injects
// nothing; tests override what they need.
//
// Ownership: the store does not own the object; it must outlive the store. Thread safety: hooks
// are called from whichever thread runs the I/O (caller threads, the write-behind worker), so an
// implementation must be thread-safe if the store is used from several threads.
#pragma once

#include <cstdint>

#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"

namespace dualpath::storage {

class StorageFaults {
 public:
  virtual ~StorageFaults() = default;
  // Before a block's read is submitted. A non-OK status fails that read as if the I/O had failed
  // with it (the block is reported as that error, not as data).
  virtual Status BeforeRead(const kv::BlockHash& /*hash*/) { return Status::Ok(); }
  // Before a block file is written: returns how many of `file_bytes` to actually write. Fewer
  // makes the write short (as when the device fills up mid-write); the store must then report an
  // error and publish nothing.
  virtual uint64_t WriteLimit(const kv::BlockHash& /*hash*/, uint64_t file_bytes) {
    return file_bytes;
  }
  // After the temporary file is written (and synced, as configured), right before the rename that
  // publishes it. Tests block here to kill the writer at the worst moment.
  virtual void BeforePublish(const kv::BlockHash& /*hash*/) {}
};

}  // namespace dualpath::storage
