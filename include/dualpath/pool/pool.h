// Pool: a shared-memory KV-block pool with decentralized metadata (TraCT §3-§4, AIBrix/PrisKV).
//
// A pool is one region of memory - a file under /dev/shm (default), a file on hugetlbfs, or a
// DAX device such as CXL Type-3 memory - that every engine process on a node (or every host on a
// CXL switch) maps directly. There is no server: each process reads and updates the shared
// metadata (prefix index, allocator, pins, roots) itself, under one metadata lock, and reads KV
// payloads in place (zero-copy) or copies them out.
//
// Lifecycle of a block: Reserve (allocate + index entry in state WRITING, invisible to readers) ->
// caller writes the payload -> Publish (state READY: the visibility boundary) -> Pin / Get /
// Contains / LongestPrefix from any process -> Unpin -> Delete, or LRU eviction of unpinned
// blocks when space runs out.
//
// Memory models (chosen when the region is created):
//  - kCoherent: ordinary DRAM on one host. The metadata lock is a robust process-shared mutex.
//  - kNonCoherent: memory shared by hosts without cache coherence or cross-host atomics (CXL).
//    TraCT's two-tier lock (per-node local lock, global slot array in the region, a lock-manager
//    thread granting slots), clflush of every metadata line written or read, payload written with
//    non-temporal stores and invalidated before a CPU reads it.
//
// Crash safety: each process registers an identity (slot + generation, pid + start time, host,
// lease). A process killed at any instruction leaves no wedged lock and no capacity held beyond
// the next recovery sweep, which runs when a lock is inherited from a dead holder, at Open, and on
// Tick() once a dead owner is seen (docs/pool.md lists the guarantees). No wait is unbounded:
// every operation that takes the metadata lock fails with kTimeout after OpenOptions::lock_timeout
// (the lock-manager role of the non-coherent model fails over to another node's process first).
//
// Ownership: a Pool object is this process's attachment; the region outlives it. PinnedBlock and
// WriteHandle are plain handles into the region and must be Unpin'ed / Published or Aborted on the
// Pool that made them.
//
// Thread safety: every Pool method may be called concurrently from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/common/clock.h"
#include "dualpath/common/status.h"
#include "dualpath/kv/block_hash.h"

namespace dualpath::pool {

using kv::BlockHash;

enum class MemoryModel : uint32_t { kCoherent = 1, kNonCoherent = 2 };
std::string_view MemoryModelName(MemoryModel m);
// "coherent" | "noncoherent"; anything else is kInvalidArgument.
Result<MemoryModel> ParseMemoryModel(std::string_view name);

// Fixed at creation; stored in the region header.
struct Geometry {
  uint64_t region_bytes = 0;
  uint64_t chunk_bytes = 4ull << 20;  // power of two, >= 4 KiB; slabs carve it into <= 64 slots
  uint64_t index_capacity = 0;        // power of two; 0 = 2 x the slots the data area can hold
  uint32_t max_procs = 64;            // processes attached at once
  uint32_t pin_records = 1024;        // distinct blocks one process may pin at once (power of 2)
  uint32_t max_roots = 64;
  uint32_t num_nodes = 8;  // non-coherent: nodes (hosts) that may attach, ids 0..num_nodes-1
  Nanos lease = 5 * kNanosPerSecond;  // leases on process liveness, pins and lock grants
  MemoryModel model = MemoryModel::kCoherent;
};

// The region_bytes of a region with geometry `g` that holds exactly `chunks` chunks and an index
// of g.index_capacity entries (set by the caller: a power of two). For callers that size a region
// to a known payload (`dualpath bench pool`); Create lays such a region out with those counts.
uint64_t RegionBytesFor(const Geometry& g, uint64_t chunks);

struct OpenOptions {
  uint32_t node = 0;          // this host's node id (non-coherent model)
  uint32_t manager_node = 0;  // preferred lock-manager node (non-coherent; the role fails over)
  // Lease clock; must outlive the Pool. nullptr = steady clock (coherent model) or the realtime
  // clock (non-coherent model: leases are compared between hosts, whose clocks must agree).
  const Clock* clock = nullptr;
  bool background_thread = true;       // renew the lease and sweep dead owners every lease/4
  std::string local_dir = "/dev/shm";  // where node-local lock files live (non-coherent model)
  uint64_t host_id = 0;                // 0 = derived from the boot id; tests override it
  // The longest this process waits for the metadata lock before the operation fails with
  // kTimeout naming the lock, the wait and (non-coherent) the lock manager's state. 0 = 3 x the
  // region's lease: long enough for another node's process to take over the lock-manager role
  // (a lease of silent heartbeat) and grant.
  Nanos lock_timeout = 0;
  // Non-coherent model: this process may take the lock-manager role (fail-over, docs/pool.md).
  bool lock_manager = true;
};

// A pinned READY block: `data` stays valid and unchanged until Unpin.
struct PinnedBlock {
  const std::byte* data = nullptr;
  uint64_t size = 0;
  uint64_t user_tag = 0;  // whatever the writer stored with the block (e.g. a checksum)
  uint32_t entry = 0;     // internal
};

// A reserved, not yet published block: write `size` bytes at `data`, then Publish or Abort.
struct WriteHandle {
  std::byte* data = nullptr;
  uint64_t size = 0;
  uint32_t entry = 0;  // internal
  uint64_t seq = 0;    // internal
};

// One attached process, as the region records it.
struct ProcInfo {
  uint32_t slot = 0;
  int32_t pid = 0;
  uint32_t node = 0;
  uint64_t pins = 0;     // sum of its pin records
  uint64_t writing = 0;  // entries it is writing (reserved, not yet published)
};

// The name of the owner-bound root that holds engine `engine_name`'s buffer region in its node's
// pool (docs/engine.md): the engine creates it, and whoever inspects a pool looks it up by it
// (`dualpath cluster run`'s check that a killed engine's buffer was reclaimed).
inline std::string EngineRootName(std::string_view engine_name) {
  return "engine/" + std::string(engine_name);
}

// Who a named root belongs to.
//  - kPersistent: owned by no process; survives every crash and every detach until DestroyRoot.
//  - kProcess: owned by the attachment (Pool object) that created it; destroyed by the recovery
//    sweep once that attachment is gone (closed, or its process dead: the same rule and the same
//    sweep that drop a dead process's pins and WRITING reservations), returning its chunks to the
//    free bitmap. For memory a process must not leak when it crashes (an engine's buffers).
enum class RootLifetime : uint32_t { kPersistent = 0, kProcess = 1 };

// One named root, as the region records it.
struct RootInfo {
  std::string name;
  uint64_t bytes = 0;  // the size asked for (it occupies whole chunks)
  RootLifetime lifetime = RootLifetime::kPersistent;
  int32_t owner_pid = 0;  // kProcess: the owner's pid (0 if its slot was already reclaimed)
};

struct PoolStats {
  MemoryModel model = MemoryModel::kCoherent;
  uint64_t region_bytes = 0, chunk_bytes = 0, num_chunks = 0, free_chunks = 0;
  uint64_t index_capacity = 0, ready_entries = 0, writing_entries = 0, pinned_entries = 0;
  uint64_t total_pins = 0, used_bytes = 0;  // used_bytes: slots/runs held by entries and roots
  uint64_t live_procs = 0, roots = 0, evictions = 0, sweeps = 0, reclaimed_procs = 0;
  uint64_t reclaimed_roots = 0;     // owner-bound roots the sweep dropped (owner gone)
  std::vector<ProcInfo> procs;      // taken in the same critical section as the counts above
  std::vector<RootInfo> root_list;  // likewise
  // Non-coherent model: the lock manager as the region records it (epoch 0: never claimed).
  uint64_t manager_epoch = 0;
  uint32_t manager_node = 0;
  int32_t manager_pid = 0;
  // Non-empty when the metadata lock was not granted within the lock timeout: the error, and
  // every count above except the geometry and the manager fields is missing.
  std::string lock_error;
};

class PoolImpl;

class Pool {
 public:
  // Formats a new region at `path` (a regular file is created and sized; a DAX character device
  // is formatted in place). Fails with kAlreadyExists if a regular file exists there.
  // The file appears under `path` only once fully formatted (formatted unnamed, then linked in
  // without replacing anything), so a concurrent Open never sees a half-formatted region and two
  // racing creators never clobber each other: the loser gets kAlreadyExists.
  static Status Create(const std::string& path, const Geometry& geometry);
  // Opens `path`, creating it with `geometry` first if it does not exist. Safe when several
  // processes race to create the same region: exactly one formats it, all attach to that one.
  static Result<std::unique_ptr<Pool>> OpenOrCreate(const std::string& path,
                                                    const Geometry& geometry,
                                                    OpenOptions options = {});
  // Attaches this process. Validates the header first; on any error nothing is written.
  static Result<std::unique_ptr<Pool>> Open(const std::string& path, OpenOptions options = {});
  // Removes a region file after checking it really is a pool region.
  static Status Destroy(const std::string& path);
  // Reads the header of a region without attaching (for `dualpath pool stat`).
  static Result<Geometry> ReadGeometry(const std::string& path);

  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // --- writes ---
  // kAlreadyExists if `hash` is READY or being written; kInvalidArgument if size is 0 or larger
  // than the data area; kPoolFull when eviction cannot make room.
  Result<WriteHandle> Reserve(const BlockHash& hash, uint64_t size, uint64_t user_tag = 0);
  Status Publish(WriteHandle& handle);
  // Publish, setting the block's user tag now instead of at Reserve: for a writer that checksums
  // the payload in the same pass that copies it in (kv::CopyAndChecksum).
  Status Publish(WriteHandle& handle, uint64_t user_tag);
  Status Abort(WriteHandle& handle);
  // Reserve + copy + Publish.
  Status Put(const BlockHash& hash, std::span<const std::byte> payload, uint64_t user_tag = 0);

  // --- reads (lock-free) ---
  bool Contains(const BlockHash& hash) const;
  // Number of leading hashes of `chain` that are READY.
  size_t LongestPrefix(std::span<const BlockHash> chain) const;

  // --- reads (pinning) ---
  // kNotFound if not READY; kResourceExhausted if this process's pin records are full.
  Result<PinnedBlock> Pin(const BlockHash& hash);
  Status Unpin(PinnedBlock& block);
  // Pin + copy into `out` + Unpin. kOutOfRange if `out` is smaller than the block. Returns size.
  Result<uint64_t> Get(const BlockHash& hash, std::span<std::byte> out,
                       uint64_t* user_tag = nullptr);

  // --- removal ---
  // kNotFound if absent, kPoolPinned if pinned.
  Status Delete(const BlockHash& hash);
  // Evicts up to `n` least-recently-used unpinned READY blocks; returns how many.
  Result<size_t> Evict(size_t n);

  // --- named root objects (TraCT put/get/destroy) ---
  // The payload is zeroed. kAlreadyExists if a live root has that name; an owner-bound root whose
  // owner is gone is reclaimed first, so the name can be taken again (an engine restarted after a
  // crash). Evicts unpinned blocks to make room; kPoolFull if that is not enough.
  Result<std::span<std::byte>> CreateRoot(std::string_view name, uint64_t size,
                                          RootLifetime lifetime = RootLifetime::kPersistent);
  Result<std::span<std::byte>> GetRoot(std::string_view name);
  Status DestroyRoot(std::string_view name);

  // --- maintenance ---
  // Renews this process's lease and, if an attached process is dead or its lease expired, runs
  // the recovery sweep. The background thread calls it every lease/4.
  Status Tick();
  // Runs the recovery sweep unconditionally.
  Status Recover();
  PoolStats Stats();
  const Geometry& geometry() const;
  // Offset <-> pointer translation for payloads (TraCT cxl_shm_get_offset / get_ptr).
  uint64_t OffsetOf(const void* p) const;
  void* PointerAt(uint64_t offset) const;

 private:
  explicit Pool(std::unique_ptr<PoolImpl> impl);
  std::unique_ptr<PoolImpl> impl_;
};

}  // namespace dualpath::pool
