// RegionIndex: the address ranges of registered memory regions, and descriptor validation.
//
// The engine keeps one index of its own registered regions and one per peer for the regions the
// peer advertised. Every descriptor of a batch is checked against both before anything is
// posted, so an out-of-range or unknown-region transfer is rejected with a Status instead of
// reaching the NIC (where RDMA would fail the whole QP, or TCP would copy out of bounds on the
// remote side).
//
// Thread safety: none; the owner serialises access (the engine guards it with its mutex).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "dualpath/common/status.h"
#include "dualpath/transfer/types.h"

namespace dualpath::transfer {

struct RegionRange {
  RegionId id;
  uint64_t addr = 0;
  uint64_t length = 0;
};

class RegionIndex {
 public:
  // InvalidArgument for an empty or wrapping range; AlreadyExists when the id is taken or the
  // range overlaps a registered one (overlaps would make the region of an address ambiguous).
  Status Insert(RegionRange r);
  // False when no region has this id.
  bool Erase(RegionId id);
  // The region containing all of [addr, addr + length), or nullptr. length 0 is never contained.
  const RegionRange* Find(uint64_t addr, uint64_t length) const;
  const RegionRange* FindId(RegionId id) const;
  size_t size() const { return by_addr_.size(); }
  std::vector<RegionRange> All() const;

 private:
  std::map<uint64_t, RegionRange> by_addr_;  // keyed by start address
};

// Which registered regions one descriptor falls in.
struct DescriptorRegions {
  RegionId local;
  RegionId remote;
};

// Checks every descriptor of a batch: non-empty batch, non-zero lengths, local range inside a
// region of `local`, remote range inside a region of `remote`. On success fills `out` (one entry
// per descriptor, same order). Errors are kTransferBadDescriptor naming the descriptor's index
// and range, or InvalidArgument for an empty batch.
Status ValidateBatch(std::span<const Descriptor> descs, const RegionIndex& local,
                     const RegionIndex& remote, std::vector<DescriptorRegions>* out);

}  // namespace dualpath::transfer
